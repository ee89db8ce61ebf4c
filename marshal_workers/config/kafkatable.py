"""The ``[kafka]`` table (librdkafka properties) from its three sources, and their naming rule.

A secret should not have to live in the fleet's TOML file. So every property also comes from:

1. the TOML file's ``[kafka]`` table (``"sasl.username" = "worker"``);
2. systemd credentials: each file ``kafka.PROPERTY`` in ``$CREDENTIALS_DIRECTORY`` (what a
   unit's ``LoadCredential=kafka.sasl.password:/etc/marshal-workers/sasl-password`` makes) is
   the property PROPERTY, its content the value;
3. the environment: ``MARSHAL_KAFKA_NAME=value``, or ``MARSHAL_KAFKA_NAME_FILE=/path`` for a
   value read from a file (`env_property` gives the rule: lower case, ``_`` is ``.``, ``__``
   is ``_``; so ``MARSHAL_KAFKA_SASL_PASSWORD`` is ``sasl.password`` and
   ``MARSHAL_KAFKA_SSL__KEY`` is ``ssl_key``). The local Kafka's own variables
   (`LOCAL_KAFKA_VARIABLES`) are not properties.

Later sources win (environment > credentials > file), as for the settings. A value read from
a file loses one trailing newline. Every value is text, as librdkafka takes it: a TOML string,
number or boolean (``true``/``false``); a list or a table is refused (exit 2), since no
librdkafka property takes one. `KafkaTable.sources` says where each property came from, for
error lines, which never show a secret's value (`common.secrets`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from marshal_workers.common.errors import ConfigError
from marshal_workers.common.secrets import remember, shown

ENV_PREFIX: Final = "MARSHAL_KAFKA_"
FILE_SUFFIX: Final = "_FILE"
CREDENTIALS_ENV: Final = "CREDENTIALS_DIRECTORY"
CREDENTIAL_PREFIX: Final = "kafka."
# `marshal-admin kafka`'s own variables (localkafka.paths): they start the same way.
LOCAL_KAFKA_VARIABLES: Final = frozenset(
    {"MARSHAL_KAFKA_DIR", "MARSHAL_KAFKA_BACKEND", "MARSHAL_KAFKA_CACHE", "MARSHAL_KAFKA_JVM_OPTS"}
)
MAX_FILE_BYTES: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class KafkaTable:
    """The merged ``[kafka]`` properties and where each came from."""

    values: Mapping[str, str] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)


def env_property(variable: str) -> str:
    """The property a ``MARSHAL_KAFKA_*`` variable names: the rest of its name in lower case,
    each ``_`` a ``.`` and each ``__`` a ``_`` (``SSL__KEY`` is ``ssl_key``)."""
    rest = variable.removeprefix(ENV_PREFIX).lower()
    return "_".join(part.replace("_", ".") for part in rest.split("__"))


def property_env(name: str) -> str:
    """The variable that sets property ``name`` (the inverse of `env_property`)."""
    return ENV_PREFIX + "__".join(p.replace(".", "_") for p in name.split("_")).upper()


def toml_value(name: str, value: Any, source: str) -> str:
    """A TOML value as librdkafka's text; ConfigError (exit 2) for a list, table or date."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    kind = "a list" if isinstance(value, list) else f"a {type(value).__name__}"
    raise ConfigError(
        f"[kafka] {name} = {shown(name, value)} from {source}: is {kind}, but librdkafka "
        "takes text (write a list as one comma-separated string)"
    )


def toml_values(table: Mapping[str, Any], source: str) -> dict[str, str]:
    """A TOML ``[kafka]`` table as text values (`toml_value`)."""
    return {str(k): toml_value(str(k), v, source) for k, v in table.items()}


def _read(path: Path, name: str, source: str) -> str:
    """The value of ``name`` in the file ``path`` (one trailing newline dropped)."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(
            f"[kafka] {name} from {source}: cannot read {path}: {exc.strerror}"
        ) from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"[kafka] {name} from {source}: {path} is larger than 1 MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"[kafka] {name} from {source}: {path} is not UTF-8 text") from None
    text = text.removesuffix("\n").removesuffix("\r")
    if not text:
        raise ConfigError(f"[kafka] {name} from {source}: {path} is empty")
    return text


def from_credentials(directory: str | None) -> KafkaTable:
    """The properties in a systemd credentials directory (files ``kafka.PROPERTY``)."""
    if not directory:
        return KafkaTable()
    values: dict[str, str] = {}
    sources: dict[str, str] = {}
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise ConfigError(f"${CREDENTIALS_ENV} {directory}: {exc.strerror}") from None
    for file_name in names:
        if not file_name.startswith(CREDENTIAL_PREFIX) or file_name == CREDENTIAL_PREFIX:
            continue
        name = file_name.removeprefix(CREDENTIAL_PREFIX)
        source = f"credential {file_name} (${CREDENTIALS_ENV})"
        values[name] = _read(Path(directory, file_name), name, source)
        sources[name] = source
    return KafkaTable(values, sources)


def from_environment(environ: Mapping[str, str]) -> KafkaTable:
    """The properties set by ``MARSHAL_KAFKA_*`` variables (an empty one sets nothing)."""
    values: dict[str, str] = {}
    sources: dict[str, str] = {}
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX) or variable in LOCAL_KAFKA_VARIABLES:
            continue
        raw = environ[variable]
        if raw == "":
            continue
        if variable.endswith(FILE_SUFFIX):
            direct = variable.removesuffix(FILE_SUFFIX)
            name = env_property(direct)
            if environ.get(direct):
                raise ConfigError(
                    f"[kafka] {name}: both ${direct} and ${variable} are set; keep one"
                )
            source = f"${variable}"
            values[name] = _read(Path(raw), name, source)
        else:
            name = env_property(variable)
            source = f"${variable}"
            values[name] = raw
        if name in ("", "_") or name.startswith(".") or name.endswith("."):
            raise ConfigError(f"${variable} names no [kafka] property (see docs/settings.md)")
        sources[name] = source
    return KafkaTable(values, sources)


def kafka_table(
    from_file: Mapping[str, str],
    file_source: str,
    environ: Mapping[str, str],
) -> KafkaTable:
    """The ``[kafka]`` table: the file's, then credentials, then the environment (later wins)."""
    values: dict[str, str] = dict(from_file)
    sources: dict[str, str] = dict.fromkeys(from_file, file_source)
    for layer in (from_credentials(environ.get(CREDENTIALS_ENV)), from_environment(environ)):
        values.update(layer.values)
        sources.update(layer.sources)
    remember(values)
    return KafkaTable(values, sources)
