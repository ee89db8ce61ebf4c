"""The last AMO loss per partition, as the coordination log shows it (pure).

`protocol.amolosses` is what `marshal-admin status` shows: per data partition, the newest
range of reserved records that may never have been handled, with its cause. It must say the
same as the audit without a ledger (`audit.amo.log_losses`): the last tests feed the same logs,
hand-written and simulated with kills, freezes, restarts and pauses, to both.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from marshal_workers.audit.local import run_local
from marshal_workers.audit.model import AuditConfig, FileInput
from marshal_workers.audit.schema import columns
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.amolosses import AT_RISK_RESERVATIONS, AmoLoss, AmoLosses
from marshal_workers.protocol.members import member_key
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.reservations import AHEAD
from marshal_workers.protocol.wire import ClaimingPartition, ClaimKey, CoordRecord, Message
from marshal_workers.sim import wholelog
from marshal_workers.sim.params import SimParams
from marshal_workers.sim.scenario import Fleet as SimFleet
from marshal_workers.sim.scenario import use_shared_decode
from tests.support import GROUP, HB, TOPIC, claim, hb, pause, record, release, reserve

T0 = 1_700_000_000_000
KEY = ClaimKey(GROUP, TOPIC, 0)


def log(*entries: tuple[int, Message]) -> list[CoordRecord]:
    """Records of one coordination partition: (ms after T0, message), in offset order."""
    return [record(m, i, T0 + t) for i, (t, m) in enumerate(entries)]


def fold_all(records: Iterable[CoordRecord], config: RationalizerConfig) -> list[ev.Event]:
    """Every event of ``records`` (each partition's in offset order), as a reader folds them."""
    worlds: dict[int, World] = {}
    out = []
    for rec in records:
        world = worlds.setdefault(rec.partition, World(config, rec.partition))
        out.append(fold(world, rec))
    return out


def losses_of(records: list[CoordRecord], hb_ms: int = HB) -> AmoLosses:
    losses = AmoLosses(hb_ms)
    losses.add_all(fold_all(records, RationalizerConfig(hb_ms)))
    return losses


def seen(loss: AmoLoss | None) -> tuple[Any, ...] | None:
    return None if loss is None else (loss.client_id, loss.start, loss.end, loss.cause)


# A clean hand-over: A reserves two runs, releases at the end of both; B goes on.
HANDOVER = (
    (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
    (200, reserve("A", 20)), (250, hb("A", 20)), (300, release("A", 20)),
    (400, claim("B")), (450, hb("B", 20)), (500, reserve("B", 30)), (550, hb("B", 30)),
)  # fmt: skip


# A-1 reserves two runs, A-2 (a restart) takes over and is killed before it reserves.
REPLACED_THEN_KILLED = (
    (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
    (200, reserve("A", 20)), (900, hb("A", 10, inst="A-2")), (950, hb("A", 20, inst="A-2")),
    (5000, claim("B")),
)  # fmt: skip


class TestNoLoss:
    def test_a_graceful_handover_loses_nothing(self) -> None:
        """Released at the end of what was reserved, then claimed by another: no loss, 0."""
        losses = losses_of(log(*HANDOVER))
        assert losses.last_loss(KEY, T0 + 600) is None
        assert losses.totals(GROUP, T0 + 600) == (0, 0)

    def test_a_holder_within_its_lease_has_lost_nothing_yet(self) -> None:
        """B's last reservation is work in progress until 2*HB after its last heartbeat."""
        losses = losses_of(log(*HANDOVER))
        assert losses.last_loss(KEY, T0 + 550 + 2 * HB) is None

    def test_an_operators_claim_loses_nothing(self) -> None:
        """The client that paused the group claims to set a position: never a loss."""
        losses = losses_of(log(
            (0, pause("marshal-admin", (T0 + 60_000) // 1000)),
            (100, claim("marshal-admin")), (150, reserve("marshal-admin", 10)),
        ))  # fmt: skip
        assert losses.last_loss(KEY, T0 + 10_000) is None

    def test_member_announcements_are_not_partitions(self) -> None:
        """A member claim that goes stale is no data partition and loses nothing."""
        announce = ClaimingPartition(0, "A-1", "A", GROUP, member_key(GROUP, "A").topic, 0)
        losses = losses_of(log((0, announce)))
        assert losses.keys(GROUP) == []


class TestCauses:
    def test_a_holder_taken_over_lost_up_to_its_last_two_reservations(self) -> None:
        """A reserves [0, 10), [10, 20), [20, 30) and goes silent; B claims after 2*HB: the
        run A handled or awaited and the one asked ahead, [10, 30), are at risk."""
        losses = losses_of(log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (200, reserve("A", 20)), (250, hb("A", 20)), (300, reserve("A", 30)),
            (350, hb("A", 30)), (3000, claim("B")),
        ))  # fmt: skip
        loss = losses.last_loss(KEY, T0 + 3100)
        assert seen(loss) == ("A", 10, 30, "taken_over")
        assert loss is not None and loss.records == 20 and loss.successor == "B"
        assert loss.lost_ms == T0 + 350 + 2 * HB and loss.reserved_ms == T0 + 300
        assert losses.totals(GROUP, T0 + 3100) == (1, 20)

    def test_a_write_made_again_that_landed_twice_puts_no_reservation_out_of_the_window(
        self,
    ) -> None:
        """A's reservation up to 30 was told it failed and written again, and both landed: the
        second reserves nothing. B claims after 2*HB: [10, 30) is at risk, as without the
        duplicate (it counted as a reservation and pushed [10, 20) out: a review's sweep, seed
        153008 of `failures,read-latency,kill,stall`, two records lost and shown nowhere)."""
        losses = losses_of(log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (200, reserve("A", 20)), (250, hb("A", 20)), (300, reserve("A", 30)),
            (320, reserve("A", 30)), (350, hb("A", 30)), (3000, claim("B")),
        ))  # fmt: skip
        assert seen(losses.last_loss(KEY, T0 + 3100)) == ("A", 10, 30, "taken_over")

    def test_a_silent_holder_nobody_claimed_lost_its_runs_to_its_lease(self) -> None:
        """No claim after the crash: a loss only once 2*HB passed since its last heartbeat."""
        losses = losses_of(log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
        ))  # fmt: skip
        assert losses.last_loss(KEY, T0 + 150 + 2 * HB) is None
        assert seen(losses.last_loss(KEY, T0 + 151 + 2 * HB)) == ("A", 0, 10, "lease_expired")
        assert losses.totals(GROUP, T0 + 151 + 2 * HB) == (1, 10)

    def test_a_commit_the_log_refused_after_a_takeover_is_a_refusal(self) -> None:
        """A's heartbeat comes back after B took over (a frozen member): refused."""
        losses = losses_of(log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (3000, claim("B")), (3100, hb("A", 10)),
        ))  # fmt: skip
        assert seen(losses.last_loss(KEY, T0 + 3200)) == ("A", 0, 10, "refused")

    def test_a_refused_commit_of_a_holder_nobody_claimed_is_a_refusal(self) -> None:
        """A's late heartbeat is refused as stale and nobody claimed: refused, not expired."""
        losses = losses_of(log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (3000, hb("A", 10)),
        ))  # fmt: skip
        assert seen(losses.last_loss(KEY, T0 + 3200)) == ("A", 0, 10, "refused")

    def test_a_restart_lost_what_the_old_instance_reserved(self) -> None:
        """A new instance of A takes the claim over by heartbeat: replaced."""
        losses = losses_of(log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (900, hb("A", 10, inst="A-2")), (950, reserve("A", 20, inst="A-2")),
            (960, hb("A", 20, inst="A-2")),
        ))  # fmt: skip
        loss = losses.last_loss(KEY, T0 + 1000)
        assert seen(loss) == ("A", 0, 10, "replaced")
        assert loss is not None and loss.instance_id == "A-1" and loss.lost_ms == T0 + 900

    def test_a_restarted_instance_that_reserved_nothing_lost_nothing_of_its_own(self) -> None:
        """A-2 takes over (the old instance's runs are lost, replaced) and is killed before
        it reserves: its crash adds no loss; the last loss is still A-1's."""
        losses = losses_of(log(*REPLACED_THEN_KILLED))
        assert seen(losses.last_loss(KEY, T0 + 6000)) == ("A", 0, 20, "replaced")
        assert losses.totals(GROUP, T0 + 6000) == (1, 20)

    def test_a_release_below_the_reservation_under_a_pause(self) -> None:
        """Paused; A releases at 10 with [10, 20) reserved: released under the pause."""
        losses = losses_of(log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (200, reserve("A", 20)), (400, pause("marshal-admin", (T0 + 60_000) // 1000)),
            (500, release("A", 10)),
        ))  # fmt: skip
        assert seen(losses.last_loss(KEY, T0 + 600)) == ("A", 10, 20, "released_under_pause")

    def test_a_release_below_the_reservation_without_a_pause(self) -> None:
        """A releases at 15 with [10, 20) reserved: [15, 20) released unhandled."""
        losses = losses_of(log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 20)), (500, release("A", 15)),
        ))  # fmt: skip
        assert seen(losses.last_loss(KEY, T0 + 600)) == ("A", 15, 20, "released")

    def test_a_first_reservation_of_unknown_start_has_no_count(self) -> None:
        """Reserved before anything committed: the log does not say where it began."""
        losses = losses_of(log((0, claim("A")), (100, reserve("A", 10)), (3000, claim("B"))))
        loss = losses.last_loss(KEY, T0 + 3100)
        assert seen(loss) == ("A", None, 10, "taken_over") and loss is not None
        assert loss.records is None and losses.totals(GROUP, T0 + 3100) == (1, 0)


class TestLastLoss:
    def test_the_last_loss_stays_after_later_clean_handovers(self) -> None:
        """A crash, then B's clean release: the crash is still the last loss, counted once."""
        losses = losses_of(log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (3000, claim("B")), (3050, reserve("B", 20)), (3100, hb("B", 20)),
            (3200, release("B", 20)),
        ))  # fmt: skip
        assert seen(losses.last_loss(KEY, T0 + 9000)) == ("A", 0, 10, "taken_over")
        assert losses.totals(GROUP, T0 + 9000) == (1, 10)

    def test_a_newer_loss_replaces_the_last(self) -> None:
        """A crashes, then B crashes: B's loss is the last, both are counted."""
        losses = losses_of(log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (3000, claim("B")), (3050, reserve("B", 25)), (3100, hb("B", 25)),
        ))  # fmt: skip
        at = T0 + 3100 + 2 * HB + 1
        assert seen(losses.last_loss(KEY, at)) == ("B", 10, 25, "lease_expired")
        assert losses.totals(GROUP, at) == (2, 25)

    def test_the_window_is_the_childs_own(self) -> None:
        """At risk are the run a child handles and the ones it asked for ahead of it."""
        assert AT_RISK_RESERVATIONS == AHEAD + 1


# ---- agreement with the audit -----------------------------------------------------------------


def audit_losses(records: list[CoordRecord], hb_ms: int) -> list[dict[str, Any]]:
    config = AuditConfig(FileInput(Path("-")), Path("-"), hb_ms, report=False)
    _, tables = run_local(records, config)
    return [dict(zip(columns("amo_losses"), r, strict=True)) for r in tables["amo_losses"]]


def agree(records: list[CoordRecord], hb_ms: int, config: RationalizerConfig) -> int:
    """Check that the status's losses are the audit's at the log's end; return how many
    ranges were lost."""
    end = max(r.timestamp_ms for r in records)
    events = fold_all(records, config)
    losses = AmoLosses(hb_ms)
    losses.add_all(events)
    rows = audit_losses(records, hb_ms)
    by_key: dict[ClaimKey, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_key[ClaimKey(row["group"], row["topic"], row["partition"])].append(row)
    for group in {e.key.group for e in events if isinstance(e, ev.ClaimVerdict)}:
        mine = [r for k, rs in by_key.items() if k.group == group for r in rs]
        expected = (len(mine), sum(r["count"] or 0 for r in mine))
        assert losses.totals(group, end) == expected, group
        for key in losses.keys(group):
            newest = max(by_key.get(key, []), key=lambda r: r["lost_ms"], default=None)
            got = losses.last_loss(key, end)
            want = None if newest is None else (
                newest["client_id"], newest["instance_id"], newest["start_offset"],
                newest["end_offset"], newest["cause"], newest["lost_ms"],
            )  # fmt: skip
            have = None if got is None else (
                got.client_id, got.instance_id, got.start, got.end, got.cause, got.lost_ms,
            )  # fmt: skip
            assert have == want, key
    return len(rows)


class TestAgreesWithTheAudit:
    CASES: ClassVar[dict[str, tuple[tuple[int, Message], ...]]] = {
        "handover": HANDOVER,
        "taken over": (
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (200, reserve("A", 20)), (250, hb("A", 20)), (300, reserve("A", 30)),
            (3000, claim("B")), (3100, reserve("B", 40)), (3150, hb("B", 40)),
        ),
        "refused": (
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (3000, claim("B")), (3100, hb("A", 10)), (3200, hb("B", 10)),
        ),
        "replaced": (
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (900, hb("A", 10, inst="A-2")), (950, reserve("A", 20, inst="A-2")),
            (960, hb("A", 20, inst="A-2")), (970, release("A", 20, inst="A-2")),
        ),
        "replaced, then killed": REPLACED_THEN_KILLED,
        "released under pause": (
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (200, reserve("A", 20)), (400, pause("marshal-admin", (T0 + 60_000) // 1000)),
            (500, release("A", 10)),
        ),
        "lease expired": (
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (5000, claim("B", part=1)),
        ),
    }  # fmt: skip

    @pytest.mark.parametrize("case", sorted(CASES))
    def test_hand_written_logs(self, case: str) -> None:
        """Each cause, and a clean hand-over, say the same in the status and the audit."""
        lost = agree(log(*self.CASES[case]), HB, RationalizerConfig(HB))
        assert (lost == 0) == (case == "handover")

    def test_simulated_fleets_with_kills_freezes_restarts_and_pauses(self) -> None:
        """marshal-sim fleets (an AMO group among them) with crashes and operations: the
        status's last loss and totals per partition are the audit's, seed after seed."""
        use_shared_decode()
        lost = 0
        for seed in range(12):
            params = SimParams(
                seed=seed, members=4, groups=2, partitions=4, duration=20,
                faults=("kill", "freeze", "restart", "pause"), fault_count=4,
            )  # fmt: skip
            fleet = SimFleet(params)
            fleet.run()
            records = [r for part in fleet.log.shadow for r in part]
            config = wholelog.reference_config(fleet)
            lost += agree(records, int(params.heartbeat_interval * 1000), config)
        assert lost > 0, "the seeds should crash some AMO holders after a reservation"


def test_a_stripes_loss_counts_its_own_offsets_of_the_range() -> None:
    """Status's "up to N records" of an unordered slice: its own offsets of the range, not the
    range's width (a review: 151,584 shown for 6,369 lost); a key slice's: the width."""
    def loss(topic: str) -> AmoLoss:
        return AmoLoss(ClaimKey(GROUP, topic, 0), "c", "i", 7, 10, 30, "taken_over", 1, 2, "d")

    assert loss("orders+unordered.1of4").records == 5  # 13, 17, 21, 25, 29
    assert loss("orders+key.1of4").records == 20
    assert loss("orders").records == 20
