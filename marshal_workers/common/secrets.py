"""Which ``[kafka]`` properties hold a secret, and text with their values taken out.

No output of the package (an error line, a log line, status, metrics, a process title) may
carry a secret's value, whatever the key's spelling: an operator who types ``sasl.pasword``
gets an error line about that key, and it must not print the password. So a key is judged by
its shape, not looked up in a list:

- its words (split at anything not a letter or digit, lower case) are compared with the words
  secrets are named by (`SECRET_WORDS`: password, secret, key, token, jaas, credential, ...):
  a word equal to one, containing a long one (``saslpassword``), or close to one by
  `difflib`'s ratio (`FUZZ`: ``pasword``, ``secert``, ``tokn``, ``credentail``) is a secret's;
- the whole key is compared the same way with librdkafka's sensitive properties
  (`SENSITIVE_PROPERTIES`: ``saslpasword`` is close to ``sasl.password``).

Judging too much a secret costs a ``'***'`` where a value would have helped; too little costs
a leaked password, so the rule errs on the first side. `shown` gives a value as an error line
may print it; `redact_text` takes every secret value of a table out of a text (librdkafka's
own messages may quote a value), and also anything written as ``password="..."`` (a JAAS line
in a Java error). The values of the process's own ``[kafka]`` table are remembered when it is
read (`remember`), so that the one error line every command ends with (`consolescripts`) is
cleaned of them whatever raised it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from difflib import SequenceMatcher
from functools import cache
from typing import Any, Final

MASK: Final = "***"
FUZZ: Final = 0.8  # difflib ratio from which a word is taken for a secret's word
SECRET_WORDS: Final = (
    "password", "passwd", "passphrase", "passwort", "pass", "pwd", "pw", "secret", "secrets",
    "key", "token", "jaas", "credential", "credentials", "cred", "creds",
)  # fmt: skip
# librdkafka's properties marked sensitive (CONFIGURATION.md), and the Java client's (Spark).
SENSITIVE_PROPERTIES: Final = (
    "sasl.password", "sasl.oauthbearer.client.secret", "sasl.oauthbearer.config",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.private.key.pem", "ssl.key.password", "ssl.key.pem", "ssl_key",
    "ssl.keystore.password", "ssl.truststore.password", "sasl.jaas.config",
)  # fmt: skip
_LONG_WORDS: Final = (*(w for w in SECRET_WORDS if len(w) >= 4), "key", "pwd")
_WORD = re.compile(r"[a-z0-9]+")
# `name = "value"`, `name=value`, `name: value` where name looks like a secret's (a JAAS line)
_ASSIGNED = re.compile(
    r"""(?P<name>[A-Za-z0-9_.\-]*(?:pass|pwd|secret|token|credential)[A-Za-z0-9_.\-]*)"""
    r"""(?P<eq>\s*[=:]\s*)(?P<value>"[^"]*"|'[^']*'|[^\s,;}"']+)""",
    re.IGNORECASE,
)


_REMEMBERED: set[str] = set()


def remember(table: Mapping[str, Any]) -> None:
    """Keep the secret values of ``table`` (this process's own) for every later `redact_text`."""
    _REMEMBERED.update(secret_values(table))


def _close(a: str, b: str) -> bool:
    return SequenceMatcher(None, a, b).ratio() >= FUZZ


@cache
def is_secret_key(key: str) -> bool:
    """Whether the property ``key`` (any spelling) may hold a secret (see the module doc)."""
    lowered = key.strip().lower()
    for word in _WORD.findall(lowered):
        if any(word == w or _close(word, w) for w in SECRET_WORDS):
            return True
        if any(w in word for w in _LONG_WORDS):
            return True
    squashed = re.sub(r"[^a-z0-9]", "", lowered)
    return any(
        _close(lowered, p) or _close(squashed, re.sub(r"[^a-z0-9]", "", p))
        for p in SENSITIVE_PROPERTIES
    )


def shown(key: str, value: Any) -> str:
    """``value`` as an output may show it for ``key``: its repr, or ``'***'`` for a secret's."""
    return repr(MASK) if is_secret_key(key) else repr(value)


def secret_values(table: Mapping[str, Any]) -> list[str]:
    """The values of ``table`` whose keys look like a secret's, longest first."""
    values = {str(v) for k, v in table.items() if is_secret_key(str(k)) and str(v)}
    return sorted(values, key=len, reverse=True)


def redact_text(text: str, *tables: Mapping[str, Any], values: Iterable[str] = ()) -> str:
    """``text`` with every secret value of ``tables`` (and ``values``) replaced by ``***``, and
    the value of anything written as ``password=...`` or ``secret: ...`` too."""
    found = {v for table in tables for v in secret_values(table)} | {v for v in values if v}
    found |= _REMEMBERED
    for value in sorted(found, key=len, reverse=True):
        if len(value) >= 4:
            text = text.replace(value, MASK)
        else:  # a short value replaces only where it stands quoted or assigned
            for quoted in (f'"{value}"', f"'{value}'", f"={value}"):
                text = text.replace(quoted, quoted.replace(value, MASK))
    return _ASSIGNED.sub(lambda m: f"{m['name']}{m['eq']}{MASK}", text)


def redact_event(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
    """A structlog processor: the remembered secret values taken out of every text field."""
    if not _REMEMBERED:
        return event
    for key, value in event.items():
        if isinstance(value, str) and any(secret in value for secret in _REMEMBERED):
            event[key] = redact_text(value)
    return event


def redacted(table: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``table`` with the values of its secret-looking keys replaced by ``***``."""
    return {k: MASK if is_secret_key(str(k)) else v for k, v in table.items()}
