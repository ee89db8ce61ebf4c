"""The settings reference (docs/settings.md), generated from the one settings table.

    python -m marshal_workers.config.settingsdoc > docs/settings.md

A unit test fails when the committed page differs from what the table generates, so the
reference cannot drift from the code.
"""

from __future__ import annotations

from marshal_workers.config.kafkatable import (
    CREDENTIAL_PREFIX,
    CREDENTIALS_ENV,
    ENV_PREFIX,
    FILE_SUFFIX,
    LOCAL_KAFKA_VARIABLES,
    property_env,
)
from marshal_workers.config.settings import SECTIONS, SETTINGS, Setting


def _default(setting: Setting) -> str:
    value = setting.default
    if value in (None, "", ()):
        return "—"
    if isinstance(value, tuple | list):
        return ", ".join(f"`{v}`" for v in value) or "—"
    return f"`{value}`"


def markdown() -> str:
    """The reference page: one table per section, every setting with its three spellings."""
    lines = [
        "# marshal-run settings",
        "",
        "Generated from `marshal_workers/config/settings.py` by "
        "`python -m marshal_workers.config.settingsdoc`; do not edit by hand.",
        "",
        "Every setting is a flag, a `MARSHAL_*` environment variable and a key of the TOML "
        "file given with `--config` (which may also hold a `[kafka]` table passed to "
        "librdkafka). Precedence: flag > environment > file > default.",
    ]
    sections = [s for s in SECTIONS if any(x.section == s for x in SETTINGS)]
    sections += sorted({x.section for x in SETTINGS} - set(sections))
    for section in sections:
        lines += [
            "",
            f"## {section}",
            "",
            "| flag | environment | TOML key | default | meaning |",
            "| --- | --- | --- | --- | --- |",
        ]
        for s in (x for x in SETTINGS if x.section == section):
            choices = f" One of: {', '.join(s.choices)}." if s.choices else ""
            repeat = " Repeatable." if s.multiple else ""
            meaning = f"{s.help}{choices}{repeat}".replace("|", "\\|")
            lines.append(f"| `{s.flag}` | `{s.env}` | `{s.name}` | {_default(s)} | {meaning} |")
    return "\n".join(lines + kafka_table_section()) + "\n"


def kafka_table_section() -> list[str]:
    """How the ``[kafka]`` table's properties are given (`config.kafkatable`)."""
    examples = ("sasl.password", "ssl.ca.location", "ssl_key")
    rows = [f"| `{property_env(name)}` | `{name}` |" for name in examples]
    reserved = ", ".join(f"`{v}`" for v in sorted(LOCAL_KAFKA_VARIABLES))
    return [
        "",
        "## The `[kafka]` table",
        "",
        "librdkafka properties (TLS, SASL, timeouts) for every Kafka client of `marshal-run`, "
        "`marshal-admin` and `marshal-audit`, as librdkafka names them. Each comes from, the "
        "later winning:",
        "",
        '1. the `[kafka]` table of the `--config` file (`"sasl.username" = "billing"`; a '
        "string, number or boolean: a list or a table is refused);",
        f"2. a systemd credential: each file `{CREDENTIAL_PREFIX}<PROPERTY>` in "
        f"`${CREDENTIALS_ENV}` (the unit's `LoadCredential={CREDENTIAL_PREFIX}sasl.password:"
        "/etc/marshal-workers/sasl-password`) sets PROPERTY to its content;",
        f"3. the environment: `{ENV_PREFIX}NAME=value`, or `{ENV_PREFIX}NAME{FILE_SUFFIX}=PATH` "
        "for a value read from a file. NAME is the property in upper case, each `.` written "
        "`_` and each `_` written `__`:",
        "",
        "| variable | property |",
        "| --- | --- |",
        *rows,
        "",
        f"{reserved} are `marshal-admin kafka`'s own variables, not properties. A value read "
        "from a file loses one trailing newline. The table is checked with librdkafka when the "
        "configuration is read, each property alone and then all together (exit 2, one line "
        "naming the property and where it came from); no line ever shows the value of a "
        "property that looks like a secret's (password, secret, key, token, JAAS, credential, "
        "misspelt or not). Safety's pins (acks, idempotence, the coordination log's isolation "
        "level) cannot be changed. How to connect to a secured cluster: "
        "[operating.md](operating.md#a-secured-cluster).",
    ]


def main() -> None:
    """Print the page."""
    print(markdown(), end="")


if __name__ == "__main__":
    main()
