"""`marshal-admin group-settings --json`: the show form as one JSON object (a review of a
many-group fleet found every other read-only command had ``--json``, and this one none)."""

from __future__ import annotations

import json
from dataclasses import replace

from click.testing import CliRunner

from marshal_workers.admin.cli import cli
from marshal_workers.admin.group_settings import settings_json
from marshal_workers.protocol.metadata import GroupSettings
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.placement import Placement
from marshal_workers.protocol.slicing import Ordering, Slicing
from marshal_workers.protocol.wire import Partitioner


def _settings(**changes: object) -> GroupSettings:
    base = GroupSettings(1_700_000_000, "i-1", "ops", "shop.billing", 2000, Partitioner.SPEC,
                         frozenset({"ops", "deploy"}))  # fmt: skip
    return replace(base, **changes)  # type: ignore[arg-type]


def test_a_recorded_group_shows_every_setting() -> None:
    placed = Placement(partitions=8, first=3, span=2, token_base=1000)
    shown = settings_json("shop.billing", _settings(slicing=Slicing(Ordering.KEY, 4),
                                                    placement=placed, mode=Mode.AMO))  # fmt: skip
    assert json.loads(json.dumps(shown)) == {
        "group": "shop.billing",
        "recorded": True,
        "heartbeat_interval_ms": 2000,
        "partitioner": "spec",
        "admin_client_ids": ["deploy", "ops"],
        "ordering": "key",
        "workers_per_partition": 4,
        "placement": {"first": 3, "span": 2, "partitions": 8, "token_base": 1000},
        "mode": "amo",
    }


def test_a_spread_group_open_to_any_admin() -> None:
    shown = settings_json("g", _settings(admin_client_ids=None))
    assert shown["placement"] is None and shown["admin_client_ids"] is None
    assert shown["ordering"] == "partition" and shown["workers_per_partition"] == 1
    assert shown["mode"] is None  # recorded before modes were


def test_the_mode_goes_with_change_only() -> None:
    """--mode changes the recorded mode with --change; alone it is refused (exit 2)."""
    out = CliRunner().invoke(cli, ["group-settings", "--group", "g", "--mode", "amo",
                                   "--bootstrap-servers", "127.0.0.1:1"])  # fmt: skip
    assert out.exit_code == 2 and "--mode goes with --change" in out.output, out.output


def test_a_group_without_recorded_settings() -> None:
    assert settings_json("g", None) == {"group": "g", "recorded": False}


def test_json_goes_with_the_show_form_only() -> None:
    """--change and --move print what they did, not settings: --json with them is refused
    before anything is reached (exit 2)."""
    for form in ("--change", "--move"):
        out = CliRunner().invoke(cli, ["group-settings", "--group", "g", form, "--json",
                                       "--bootstrap-servers", "127.0.0.1:1"])  # fmt: skip
        assert out.exit_code == 2, out.output
        assert "--json" in out.output
