"""Ordering modes with real processes and a real broker: one hot partition shared by
several fenced workers, each holding a slice of it in the log.

- ``key``: every record handled by the worker of its key's slice, per-key offset order and
  never two records of one key at once, across two members;
- ``unordered`` under AMO with a kill -9: no offset handled twice, the survivor takes the dead
  member's stripes over, and what is lost lies in the dead member's stripes within the loss
  window of each;
- a member whose cut differs from the group's is refused with one line;
- marshal-audit's checks (the single-process path over the real log and ledger) find both
  fleets clean, judging each row by its own slice's claim, and name a row of another slice.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from collections import defaultdict
from pathlib import Path

from marshal_workers.admin.connection import Connection, read_records
from marshal_workers.audit.ledger import ledger_files, read_entries
from marshal_workers.audit.local import run_local
from marshal_workers.audit.model import AuditConfig, AuditResult, FileInput
from marshal_workers.audit.schema import columns
from marshal_workers.common.ledgerfile import LedgerRow, find_duplicates, find_overlaps
from marshal_workers.core.settings import DISCOVERY_INTERVAL_S
from marshal_workers.protocol.slicing import Ordering, Slice
from tests.integration.fleet import Fleet, MakeFleet

HB = 1.0
DISCOVERY_S = DISCOVERY_INTERVAL_S  # a member looks for new partitions this often


def key_of(i: int) -> bytes:
    return f"k{i % 13}".encode()


def expected_slice(row: LedgerRow, ordering: Ordering, count: int, keys: bool) -> str:
    offset = row.offset
    key = key_of(offset) if keys else None  # one partition: record i is at offset i
    (part,) = [
        Slice(ordering, count, i)
        for i in range(count)
        if Slice(ordering, count, i).takes(offset, key)
    ]
    return part.name


def test_key_slices_share_a_partition_in_key_order(make_fleet: MakeFleet) -> None:
    """Two ALO members, one partition cut into 4 key slices: both members work (two slices
    each), every record is handled once by its key's slice, and each key's records are handled
    in offset order, one at a time."""
    fleet = make_fleet(mode="alo", hb=HB, partitions=1, ledger_delay_ms=3)
    records = 600
    fleet.produce(records, key=key_of)
    started = time.monotonic()
    cut = ("--ordering", "key", "--workers-per-partition", "4")
    fleet.start("a", *cut)
    fleet.start("b", *cut)
    fleet.wait_for(lambda: len(set(fleet.slice_holders().values())) == 2, 60, "both members")
    fleet.wait_for(fleet.handled_everything, 120, "every record handled")
    # past the first periodic discovery of the data topics (10 s after start), which once
    # dropped every slice claim as not the member's own: the fleet stopped for good
    time.sleep(max(0.0, DISCOVERY_S + 6 - (time.monotonic() - started)))
    fleet.produce(100, key=key_of)
    fleet.wait_for(fleet.handled_everything, 60, "records written after a discovery")
    rows = fleet.ledger()
    assert not find_duplicates(rows)
    assert not find_overlaps(rows)  # one holder per slice at a time
    assert all(row.slice == expected_slice(row, Ordering.KEY, 4, True) for row in rows)
    assert len({row.client_id for row in rows}) == 2
    assert len({row.offset for row in rows}) == records + 100
    by_key: dict[bytes, list[LedgerRow]] = defaultdict(list)
    for row in rows:
        by_key[key_of(row.offset)].append(row)
    for key, handled in by_key.items():
        handled.sort(key=lambda r: r.start)
        offsets = [r.offset for r in handled]
        assert offsets == sorted(offsets), f"key {key!r} out of order"
        for before, after in itertools.pairwise(handled):
            assert before.end <= after.start, f"key {key!r} handled twice at once"
    assert len(fleet.slice_holders()) == 4
    assert audit(fleet).violations == []  # each row matched to its own slice's claim
    first = rows[0]
    assert first.key_hash is not None
    forged = first._replace(key_hash=first.key_hash + 1)  # a record of another slice
    (fleet.ledger_dir / "ledger-forged.jsonl").write_text(forged.line() + "\n")
    found = audit(fleet).violations
    assert [(v[0], v[4], v[-1]) for v in found] == [("wrong_slice", first.offset, first.slice)]


def test_unordered_stripes_survive_a_kill_at_most_once(make_fleet: MakeFleet) -> None:
    """Two AMO members, one partition cut into 4 offset stripes; one member is killed -9 while
    it works. No offset is handled twice; the survivor takes every stripe over and handles the
    rest; what is never handled lies in the dead member's stripes, at most the loss window
    (``--amo-window``) of each."""
    fleet = make_fleet(mode="amo", hb=HB, partitions=1, ledger_delay_ms=4)
    records, window = 2000, 100
    fleet.produce(records)
    cut = ("--ordering", "unordered", "--workers-per-partition", "4")
    victim = fleet.start("a", *cut, "--amo-window", str(window))
    fleet.start("b", *cut, "--amo-window", str(window))
    fleet.wait_for(lambda: len(set(fleet.slice_holders().values())) == 2, 60, "both members")
    fleet.wait_for(lambda: len(fleet.ledger()) >= 300, 60, "work under way")
    dead_stripes = {
        topic.rsplit("+", 1)[1] for topic, holder in fleet.slice_holders().items() if holder == "a"
    }
    victim.signal(signal.SIGKILL)
    for pid in victim.children():
        fleet_kill(pid)
    fleet.wait_for(
        lambda: set(fleet.slice_holders().values()) == {"b"} and len(fleet.slice_holders()) == 4,
        60,
        "the survivor to hold every stripe",
    )

    def settled() -> bool:
        rows = fleet.ledger()
        return bool(rows) and max(r.end for r in rows) < _now() - 3 * HB

    fleet.wait_for(lambda: _caught_up(fleet, records) and settled(), 120, "the rest handled")
    rows = fleet.ledger()
    assert not find_duplicates(rows), "an offset handled twice under AMO"
    assert not find_overlaps(rows)
    assert all(row.slice == expected_slice(row, Ordering.UNORDERED, 4, False) for row in rows)
    handled = {r.offset for r in rows}
    lost = [o for o in range(records) if o not in handled]
    lost_by_stripe: dict[str, int] = defaultdict(int)
    for offset in lost:
        lost_by_stripe[Slice(Ordering.UNORDERED, 4, offset % 4).name] += 1
    assert set(lost_by_stripe) <= dead_stripes, (lost_by_stripe, dead_stripes)
    assert all(n <= window for n in lost_by_stripe.values()), lost_by_stripe
    assert any(r.client_id == "b" and r.slice in dead_stripes for r in rows)
    result = audit(fleet)
    assert result.violations == []
    cols = columns("amo_losses")
    t, s, e = (cols.index(c) for c in ("topic", "start_offset", "end_offset"))
    reported = {
        (str(r[t]).rsplit("+", 1)[1], o)
        for r in result.tables["amo_losses"]
        for o in range(r[s], r[e])
    }
    assert {(Slice(Ordering.UNORDERED, 4, o % 4).name, o) for o in lost} <= reported


def test_a_member_with_another_cut_is_refused(make_fleet: MakeFleet) -> None:
    """The group's cut is recorded by its first member; a member cutting otherwise would share
    records with it, so it exits 2 with one line naming both cuts."""
    fleet = make_fleet(mode="alo", hb=HB, partitions=1)
    fleet.produce(10, key=key_of)
    fleet.start("a", "--ordering", "key", "--workers-per-partition", "4")
    fleet.wait_for(lambda: len(fleet.slice_holders()) == 4, 60, "the first member's claims")
    other = fleet.start("b", "--ordering", "key", "--workers-per-partition", "8")
    assert other.wait(60) == 2
    tail = other.log_tail(40)
    assert "ordering is key with 8 workers per partition here but key with 4" in tail
    whole = fleet.start("c")
    assert whole.wait(60) == 2


def audit(fleet: Fleet) -> AuditResult:
    """marshal-audit's checks over the fleet's coordination log and ledger, in one process."""
    hb_ms = int(HB * 1000)
    records = [
        r for r, _ in read_records(Connection(fleet.bootstrap, fleet.coordination, hb_ms), 30)
    ]
    ledger, incomplete = read_entries(ledger_files([fleet.ledger_dir]))
    assert incomplete == 0
    config = AuditConfig(FileInput(Path("-")), Path("-"), hb_ms)
    result, _ = run_local(records, config, ledger, num_partitions=2)
    return result


def _caught_up(fleet: Fleet, records: int) -> bool:
    """Every stripe's position (AMO: where its next owner resumes) is at the end."""
    positions = fleet.slice_positions()
    return len(positions) == 4 and all(
        p is not None and p >= records - 4 for p in positions.values()
    )


def _now() -> float:
    return time.time()


def fleet_kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
