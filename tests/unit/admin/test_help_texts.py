"""The commands' help says what is true: every exit code, where a value comes from when the
group's settings in the log decide it, what each option is, and only the options that mean
something to the command."""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from marshal_workers.admin.cli import cli
from marshal_workers.common import errors
from marshal_workers.supervisor.command import marshal_run

FROM_THE_LOG = ("--heartbeat-interval", "--partitioner", "--admin-client-ids")


def help_of(command: click.Command, *path: str) -> str:
    out = CliRunner().invoke(command, [*path, "--help"], terminal_width=200)
    assert out.exit_code == 0, out.output
    return " ".join(out.output.split())  # one line: wrapping does not matter


def test_marshal_run_help_names_every_exit_code() -> None:
    """Each EXIT_* code of the package is named in marshal-run --help."""
    text = help_of(marshal_run)
    codes = {v for k, v in vars(errors).items() if k.startswith("EXIT_")}
    assert codes == {0, 1, 2, 3, 4, 5, 6}
    for code in codes:
        assert re.search(rf"\b{code} [a-z]", text), (code, text)


def admin_commands_with(option: str) -> list[tuple[str, ...]]:
    """The marshal-admin commands (as argv paths) that take ``option``."""
    found = []

    def walk(command: click.Command, path: tuple[str, ...]) -> None:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, (*path, name))
        elif any(option in p.opts for p in command.params):
            found.append(path)

    walk(cli, ())
    return found


@pytest.mark.parametrize("option", FROM_THE_LOG)
def test_settings_the_log_decides_show_no_bare_default(option: str) -> None:
    """Where the group's settings in the log give the value, the help says so instead of
    showing the built-in default as if it applied."""
    commands = admin_commands_with(option)
    assert commands
    for path in commands:
        text = help_of(cli, *path)
        described = text[text.index(option) :]
        described = described[: described.index("[env:")]
        assert "the group's settings in the log" in described, (path, described)


def test_skip_and_retry_record_describe_partition() -> None:
    """--partition of skip-record and retry-record has a description."""
    for name in ("skip-record", "retry-record"):
        text = help_of(cli, name)
        described = text[text.index("--partition INTEGER") :].split("--offset")[0]
        assert "partition the failing record is in" in described, described


@pytest.mark.parametrize("path", [("topic", "create"), ("produce",)])
def test_data_commands_offer_no_coordination_settings(path: tuple[str, ...]) -> None:
    """topic create and produce write data topics: no heartbeat interval, partitioner, admin
    client ids or coordination topic."""
    text = help_of(cli, *path)
    for option in (*FROM_THE_LOG, "--coordination-topic"):
        assert option not in text, (path, option)
    assert "--bootstrap-servers" in text and "--config" in text
