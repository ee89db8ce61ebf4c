"""A synthetic fleet's coordination log and ledger, for tests, demos and the benchmark.

Deterministic for a seed. Data partitions (and one member claim per client) are visited
round robin, each about every HB/2 of log time, so healthy holders never go stale. On a
visit the holder heartbeats (ALO) or reserves the next batch (AMO); now and then it hands
the partition over (ReleasingPartition, then another client's claim on the next visit) or
fails (it goes silent for more than 2*HB, then another client claims). Each claim is placed on
its home coordination partition (`coordination_partition`, spec partitioner). With
``lose_rate`` (AMO), a holder now and then reserves its next batch and crashes before handling
it: the batch is lost (at most once), and `Synthetic.lost` lists it.

The ledger is what obedient handlers would write: the records below each committed position
handled before the heartbeat that committed them (ALO), or the reserved batch handled right
after its reservation (AMO), always inside the claim's interval. A clean run of the audit over
both finds no violation; tests inject the faults.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from marshal_workers.common.ledgerfile import LedgerRow
from marshal_workers.protocol.members import member_key
from marshal_workers.protocol.wire import (
    ClaimingMessages,
    ClaimingPartition,
    CoordRecord,
    Heartbeat,
    Message,
    ReleasingPartition,
    coordination_partition,
    encode,
    record_key,
)

T0 = 1_700_000_000_000


@dataclass(frozen=True, slots=True)
class Fleet:
    """The shape of the simulated fleet."""

    partitions: int = 16
    clients: int = 4
    coord_partitions: int = 4
    hb_ms: int = 1000
    amo: bool = False
    batch: int = 20
    handover_rate: float = 0.004
    failure_rate: float = 0.002
    lose_rate: float = 0.0  # AMO: crash right after reserving a batch (the batch is lost)
    seed: int = 7
    start_ms: int = T0
    group: str = "shop"
    topic: str = "orders"


@dataclass(slots=True)
class _Slot:
    client: str
    topic: str
    partition: int
    member: bool
    offset: int = 0
    silent_until: int | None = None
    claim_next: str | None = None
    last_visit: int = 0


@dataclass(slots=True)
class Synthetic:
    """A generated log (records in offset order per partition) and its clean ledger."""

    records: list[CoordRecord] = field(default_factory=list)
    ledger: list[LedgerRow] = field(default_factory=list)
    lost: list[tuple[str, int, int, int]] = field(default_factory=list)  # topic, part, [s, e)


def _client(i: int) -> str:
    return f"client-{i}"


def messages(
    n: int,
    fleet: Fleet,
    ledger: list[LedgerRow] | None = None,
    lost: list[tuple[str, int, int, int]] | None = None,
) -> Iterator[tuple[int, Message]]:
    """``n`` messages with their log times (ms); the ledger rows are appended to ``ledger``,
    the batches lost in crashes after their reservation to ``lost``."""
    rng = random.Random(fleet.seed)
    g, names = fleet.group, [_client(i) for i in range(fleet.clients)]
    slots = [
        _Slot(names[p % fleet.clients], fleet.topic, p, False) for p in range(fleet.partitions)
    ]
    for c in names:
        key = member_key(g, c)
        slots.append(_Slot(c, key.topic, key.partition, True))
    step = max(1, fleet.hb_ms // (2 * len(slots)))
    t, sent = fleet.start_ms, 0
    for s in slots:  # everyone claims first
        if sent >= n:
            return
        yield t, ClaimingPartition(0, f"{s.client}-i", s.client, g, s.topic, s.partition)
        s.last_visit, t, sent = t, t + step, sent + 1
    while sent < n:
        for s in slots:
            t += step
            for msg in _visit(s, t, fleet, rng, names, ledger, lost):
                if sent >= n:
                    return
                yield t, msg
                sent += 1


def _visit(
    s: _Slot, t: int, fleet: Fleet, rng: random.Random, names: list[str],
    ledger: list[LedgerRow] | None, lost: list[tuple[str, int, int, int]] | None = None,
) -> list[Message]:  # fmt: skip
    """What the slot's holder writes on this visit (AMO: reserve, then commit)."""
    g, inst = fleet.group, f"{s.client}-i"
    if s.silent_until is not None:
        if t <= s.silent_until:
            return []
        s.silent_until, s.claim_next = None, _other(s.client, names, rng)
    if s.claim_next is not None:
        s.client, s.claim_next, s.last_visit = s.claim_next, None, t
        return [ClaimingPartition(0, f"{s.client}-i", s.client, g, s.topic, s.partition)]
    roll = rng.random() if not s.member else 1.0
    if roll < fleet.failure_rate:
        s.silent_until = t + 2 * fleet.hb_ms + fleet.hb_ms // 2
        return []
    if roll < fleet.failure_rate + fleet.handover_rate:
        s.claim_next = _other(s.client, names, rng)
        return [ReleasingPartition(0, inst, s.client, g, s.topic, s.partition, s.offset)]
    if fleet.amo and roll < fleet.failure_rate + fleet.handover_rate + fleet.lose_rate:
        start = s.offset  # reserve the next batch, then crash before handling any of it
        s.offset += rng.randint(1, fleet.batch)
        s.silent_until = t + 2 * fleet.hb_ms + fleet.hb_ms // 2
        if lost is not None:
            lost.append((s.topic, s.partition, start, s.offset))
        return [ClaimingMessages(0, inst, s.client, g, s.topic, s.partition, s.offset)]
    start, previous = s.offset, s.last_visit
    s.last_visit = t
    if s.member:
        return [Heartbeat(0, inst, s.client, g, s.topic, s.partition, 0)]
    s.offset += rng.randint(1, fleet.batch)
    if ledger is not None:
        lo, hi = (t, t + fleet.hb_ms // 4) if fleet.amo else (previous, t)
        _handled(ledger, s, start, lo, hi, g)
    committed = Heartbeat(0, inst, s.client, g, s.topic, s.partition, s.offset)
    if fleet.amo:
        return [ClaimingMessages(0, inst, s.client, g, s.topic, s.partition, s.offset), committed]
    return [committed]


def _other(client: str, names: list[str], rng: random.Random) -> str:
    others = [c for c in names if c != client] or names
    return rng.choice(others)


def _handled(
    ledger: list[LedgerRow], s: _Slot, start: int, lo_ms: int, hi_ms: int, group: str
) -> None:
    """Ledger rows for offsets [start, s.offset), spread strictly inside (lo_ms, hi_ms), by
    the holder's one instance (as the ledger plugin writes them: group and instance named)."""
    count = s.offset - start
    width = (hi_ms - lo_ms) / (count + 1)
    pid, instance = 1000 + int(s.client.rsplit("-", 1)[1]), f"{s.client}-i"
    for i in range(count):
        begin = (lo_ms + width * (i + 0.5) + 1) / 1000
        end = begin + 0.0001
        row = (s.topic, s.partition, start + i, s.client, pid, -1, begin, end, group, instance)
        ledger.append(LedgerRow(*row))


def generate(n: int, fleet: Fleet | None = None, with_ledger: bool = False) -> Synthetic:
    """``n`` coordination records on their home partitions, in offset order, and a ledger.

    Ledger rows carry the token of the claim they were handled under (a claim's token is the
    offset of its winning record, known only once records are placed)."""
    fleet = fleet or Fleet()
    ledger: list[LedgerRow] | None = [] if with_ledger else None
    out = Synthetic()
    next_offset = [0] * fleet.coord_partitions
    token: dict[tuple[str, int], int] = {}
    for t, msg in messages(n, fleet, ledger, out.lost):
        part = coordination_partition(msg.topic, msg.partition, fleet.coord_partitions)
        offset = next_offset[part]
        next_offset[part] += 1
        out.records.append(CoordRecord(part, offset, t, record_key(msg), encode(msg)))
        if isinstance(msg, ClaimingPartition):
            token[(msg.topic, msg.partition)] = offset
        if ledger:  # rows of the visit that wrote msg, under the holder's current claim
            out.ledger.extend(r._replace(token=token[(r.topic, r.partition)]) for r in ledger)
            ledger.clear()
    return out
