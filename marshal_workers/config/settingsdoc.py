"""The settings reference (docs/settings.md), generated from the one settings table.

    python -m marshal_workers.config.settingsdoc > docs/settings.md

A unit test fails when the committed page differs from what the table generates, so the
reference cannot drift from the code.
"""

from __future__ import annotations

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
    return "\n".join(lines) + "\n"


def main() -> None:
    """Print the page."""
    print(markdown(), end="")


if __name__ == "__main__":
    main()
