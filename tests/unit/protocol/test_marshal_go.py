"""Marshal Go: its log folded as Go folds it (migration), and our refusal to run beside it.

The fixture is a Go fleet's log in the Go library's exact text format (no record keys).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from marshal_workers.common.errors import EXIT_GO_FLEET
from marshal_workers.core.gofleet import GoFleetError, GoFleetGuard, go_writer
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.gofold import GoClaim, claimed_at, fold_all, live_claims, positions
from marshal_workers.protocol.groupstatus import group_status
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.wire import ClaimKey, CoordRecord, Heartbeat, decode, encode
from tests.unit.project import test_pure_core

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "marshal_go_log.txt"


def go_lines(path: Path = FIXTURE) -> list[bytes]:
    """The fixture's records (comments and blank lines left out)."""
    lines = path.read_text().splitlines()
    return [line.encode() for line in lines if line and not line.startswith("#")]


def go_records(lines: list[bytes]) -> list[CoordRecord]:
    """The records as Go writes them: no key; Kafka timestamps play no part in Go's fold."""
    return [CoordRecord(0, i, 0, None, value) for i, value in enumerate(lines)]


class TestGoFormat:
    def test_fixture_is_byte_for_byte_our_encoding(self) -> None:
        """Every fixture line decodes and encodes back to the same bytes."""
        for line in go_lines():
            assert encode(decode(line)) == line


class TestGoFold:
    def test_positions_are_what_the_go_fleet_would_resume_at(self) -> None:
        """Released partitions at their release offsets, a crashed one at its last heartbeat;
        ClaimingMessages plays no part (Go ignores it)."""
        world = fold_all(go_records(go_lines()))
        assert positions(world, "shop.billing") == {"orders": {0: 9, 1: 20, 2: 13, 3: 6}}
        assert positions(world, "shop.audit") == {"orders": {0: 19}}

    def test_a_claim_on_a_held_partition_is_ignored_and_its_release_dropped(self) -> None:
        """go-w2 claimed partition 0 while go-w1 held it: ignored; its release is dropped."""
        world = fold_all(go_records(go_lines()))
        assert world.claims[ClaimKey("shop.billing", "orders", 0)].current_offset == 9

    def test_any_heartbeat_is_accepted_as_go_does(self) -> None:
        """Go accepts a heartbeat from anyone (the bug we do not copy in our own fold)."""
        lines = [
            b"ClaimingPartition/1/100/i1/a/g/t/0",
            b"Heartbeat/1/101/i9/intruder/g/t/0/42",
        ]
        claim = fold_all(go_records(lines)).claims[ClaimKey("g", "t", 0)]
        assert (claim.client_id, claim.current_offset) == ("intruder", 42)

    def test_claims_are_judged_on_sender_clocks(self) -> None:
        """A claim 2*HB after the holder's last heartbeat by the *sender's* clock wins."""
        lines = [
            b"Heartbeat/1/1000/i1/a/g/t/0/5",
            b"ClaimingPartition/1/1119/i2/b/g/t/0",
            b"ClaimingPartition/1/1120/i2/b/g/t/0",
        ]
        world = fold_all(go_records(lines), hb_s=60)
        assert world.claims[ClaimKey("g", "t", 0)].client_id == "b"
        assert claimed_at(GoClaim(last_heartbeat_s=1000), 1119, 60)
        assert not claimed_at(GoClaim(last_heartbeat_s=1000), 1120, 60)
        assert not claimed_at(GoClaim(last_heartbeat_s=1000), 999, 60)  # from the future

    def test_live_claims_at_now(self) -> None:
        """A stopped fleet holds nothing now; a heartbeat a minute ago still holds."""
        world = fold_all(go_records(go_lines()))
        assert live_claims(world, "shop.billing", 1_800_000_000) == {}
        assert set(live_claims(world, "shop.billing", 1700000130)) == {
            ClaimKey("shop.billing", "orders", 2)
        }

    def test_status_view_of_the_go_log(self) -> None:
        """The Go state renders through our status view: positions and released claims."""
        from marshal_workers.protocol.gofold import as_worlds  # noqa: PLC0415

        world = fold_all(go_records(go_lines()))
        status = group_status("shop.billing", as_worlds(world), 60_000, 1_800_000_000_000, {})
        shown = {(c.partition, c.state, c.offset) for c in status.claims}
        assert shown == {
            (0, "released", 9),
            (1, "released", 20),
            (2, "stale", 13),
            (3, "released", 6),
        }


class TestRefusal:
    def _fold(self, value: bytes, key: bytes | None) -> ev.Event:
        world = World(RationalizerConfig(1000, num_partitions=1), 0)
        return fold(world, CoordRecord(0, 0, 1_000, key, value))

    def test_keyless_marshal_record_names_its_group(self) -> None:
        """Our fold marks a keyless Go record malformed and says which group it is about."""
        event = self._fold(b"Heartbeat/1/1700000060/5f3a9c1e/go-w1/shop.billing/orders/0/5", None)
        assert isinstance(event, ev.Malformed) and event.keyless_group == "shop.billing"
        assert go_writer([event], "shop.billing") is event
        assert go_writer([event], "shop.audit") is None

    def test_wrong_key_or_garbage_is_not_a_go_writer(self) -> None:
        """A record with a wrong key, or without a key and not a Marshal message, is not Go."""
        msg = Heartbeat(1, "i", "c", "g", "t", 0, 5)
        assert self._fold(encode(msg), b"x").keyless_group is None  # type: ignore[attr-defined]
        assert self._fold(b"not marshal", None).keyless_group is None  # type: ignore[attr-defined]

    def test_guard_raises_the_non_restartable_error_for_its_group_only(self) -> None:
        """The supervisor's hook refuses its own group's keyless records, with exit code 5."""
        event = self._fold(b"ClaimingPartition/1/1/i/go-w1/shop.billing/orders/1", None)
        assert isinstance(event, ev.Malformed)
        GoFleetGuard("shop.audit", "__marshal")(event)
        with pytest.raises(GoFleetError) as caught:
            GoFleetGuard("shop.billing", "__marshal")(event)
        assert caught.value.exit_code == EXIT_GO_FLEET
        assert "Marshal Go" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("module", ["protocol.gofold", "core.gofleet"])
def test_go_modules_are_pure(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Go fold and the detection import nothing that does I/O (as the core)."""
    monkeypatch.setattr(
        test_pure_core, "CORE", [*test_pure_core.CORE, "protocol.gofold", "core.gofleet"]
    )
    test_pure_core.test_core_module_imports_nothing_that_does_io(module)
