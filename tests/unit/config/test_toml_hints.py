"""A fleet's TOML file, mistyped: an unknown key gets a did-you-mean as the command line's
options do, and an unquoted dotted key in [kafka] (TOML reads it as a nested table) gets a hint
to quote it; both one usage error (exit 2) naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from marshal_workers.common.errors import ConfigError
from marshal_workers.config.settings import resolve


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    return path


def test_an_unknown_key_gets_a_did_you_mean(tmp_path: Path) -> None:
    """heartbeat_intervall: did you mean heartbeat_interval?"""
    path = config(tmp_path, 'group = "g"\nheartbeat_intervall = 4\n')
    with pytest.raises(ConfigError) as caught:
        resolve({}, path)
    assert str(caught.value) == (
        f"config file {path}: unknown setting 'heartbeat_intervall' "
        "(did you mean 'heartbeat_interval'?)"
    )
    assert caught.value.exit_code == 2


def test_an_unknown_key_far_from_any_says_no_more(tmp_path: Path) -> None:
    """No close setting: no guess."""
    path = config(tmp_path, "zzz = 1\n")
    with pytest.raises(ConfigError, match=r"unknown setting 'zzz'$"):
        resolve({}, path)


def test_an_unquoted_dotted_kafka_key_gets_a_hint_to_quote_it(tmp_path: Path) -> None:
    """security.protocol = "SSL" unquoted is the table security = {protocol = "SSL"}."""
    path = config(tmp_path, '[kafka]\nsecurity.protocol = "SSL"\n')
    with pytest.raises(ConfigError) as caught:
        resolve({}, path)
    assert str(caught.value) == (
        f"config file {path}: [kafka] security.protocol is a nested table: TOML reads an "
        'unquoted dotted key as tables; quote it: "security.protocol" = "SSL"'
    )


def test_the_hint_for_an_unquoted_secret_key_does_not_print_its_value(tmp_path: Path) -> None:
    """sasl.password = "..." unquoted: the hint quotes the key and masks the value."""
    path = config(tmp_path, '[kafka]\nsasl.password = "worker-secret-1234"\n')
    with pytest.raises(ConfigError) as caught:
        resolve({}, path)
    assert "worker-secret-1234" not in str(caught.value)
    assert str(caught.value).endswith('quote it: "sasl.password" = "***"')
