"""The `forgery` fault: a hostile writer with Write on the coordination topic, and what it must
never do to a fleet.

Anyone who may write the coordination topic can append any bytes under any key. The protocol
cannot stop such a writer from forging a valid record (a client id is self-declared: ACLs are
the only defence, docs/operating.md), but it promises that nothing it writes makes a reader
fail. So at a random time the fault lands, on random coordination partitions:

- records aimed at the fleet's groups that a reader must count as malformed: integer fields of
  4,301 digits (past Python's ``int()`` digit limit) in every record type, a pause by the
  admin client ending past 9999 or at INT64_MAX, a heartbeat interval of 10**17 ms, names of
  100 KB, a poison error of a megabyte, arbitrary bytes under the groups' keys;
- extreme but well-formed records of invented groups, each on its home partition so that the
  fold takes them: a partition of 2**31-1, an offset of INT64_MAX, a pause until the last
  second of 9999, a heartbeat interval of a year, a failure count of INT64_MAX;
- a flood of valid claims of invented groups (a few hundred, over twenty groups).

Two invariants judge it: ``no_crash`` (no record makes a member's core, or the whole-log
reader, raise: `scenario.run_seed` reports any exception of a run as a violation) and
``own_group_state`` (`own_group_state`, checked at the end of every run: a member's fold holds
claims, pauses, settings and poison counts of its own group only, so its memory is bounded by
its group whatever the flood); every other invariant must hold as ever: the forged records
change nothing of the fleet's. The contents
are drawn from a generator of their own, so the fleet's draws stay as they were.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Final

from marshal_workers.protocol.rationalizer import World
from marshal_workers.protocol.wire import coordination_partition
from marshal_workers.sim.vlog import VirtualLog

INT64_MAX: Final = 2**63 - 1
DIGITS: Final = "9" * 4301
YEAR_10000_S: Final = 253_402_300_800
LAST_SECOND: Final = YEAR_10000_S - 1
FLOOD_GROUPS: Final = 20
YEAR_MS: Final = 365 * 24 * 3600 * 1000  # the longest heartbeat interval a record may carry

Landing = tuple[int | None, bytes | None, bytes | None]  # partition (None: any), key, value


def forge(log: VirtualLog, t: float, groups: Sequence[str], admin: str, seed: object) -> int:
    """Land the hostile writer's records at virtual time ``t``; return how many."""
    rng = random.Random(f"{seed}/forgery/{t}")
    n = log.num_partitions
    targets = [(g, f"t{g}") for g in groups]  # the simulated fleet's data topics
    landings = hostile_records(rng, targets, admin, n, rng.randint(100, 400))
    for partition, key, value in landings:
        where = rng.randrange(n) if partition is None else partition
        log.land(where, key, value, t)  # type: ignore[arg-type]
    return len(landings)


def hostile_records(
    rng: random.Random,
    targets: Sequence[tuple[str, str]],
    admin: str,
    partitions: int,
    flood: int,
) -> list[Landing]:
    """What the hostile writer appends: records aimed at one of ``targets`` (group, data topic)
    that must be malformed, extreme records of an invented group, and ``flood`` valid claims
    of invented groups; each with the coordination partition it goes to (None: any)."""
    group, topic = rng.choice(list(targets))
    return [
        *_malformed(rng, group, topic, admin),
        *_extreme(partitions, admin),
        *_flood(partitions, flood),
    ]


def _malformed(rng: random.Random, g: str, topic: str, admin: str) -> list[Landing]:
    """Malformed records of group ``g`` on ``topic``, under keys no member writes: under a
    claim's own key, the cleaner would keep such a record as the key's newest and erase the
    position it follows. That a writer can erase positions so (or with a tombstone) is the
    residual risk of Write on the topic (docs/operating.md), not a reader's failure."""
    claim = f"{g}/{topic}/{2**31 - 1}"  # a partition no data topic of the fleet has
    big = "x" * 100_000
    out: list[Landing] = [
        (None, claim.encode(), f"Heartbeat/1/{DIGITS}/i/c/{g}/{topic}/0/5".encode()),
        (None, claim.encode(), f"Heartbeat/1/1/i/c/{g}/{topic}/0/{DIGITS}".encode()),
        (None, f"{claim}/claim".encode(),
         f"ClaimingPartition/1/1/i/c/{g}/{topic}/{DIGITS}".encode()),
        (None, claim.encode(), f"ReleasingPartition/1/1/i/c/{g}/{topic}/0/{DIGITS}".encode()),
        (None, claim.encode(), f"ClaimingMessages/1/{DIGITS}/i/c/{g}/{topic}/0/9".encode()),
        (None, f"{claim}/claim".encode(), f"ClaimingPartition/1/1/{big}/c/{g}/{topic}/0".encode()),
        (None, f"{claim}/poison".encode(),
         f"RecordFailed/1/1/i/c/{g}/{topic}/0/0/1/parked/{big}".encode()),
        (None, f"{claim}/poison".encode(),
         f"RecordFailed/1/1/i/c/{g}/{topic}/0/{DIGITS}/1/parked/e".encode()),
        (None, f"{g}//forged".encode(), f"GroupSettings/1/1/i/c/{g}/{10**17}/spec/*".encode()),
        (None, f"{g}//forged".encode(), f"GroupSettings/1/{DIGITS}/i/c/{g}/1000/spec/*".encode()),
        (0, b"/forged", f"CoordinationTopic/1/1/i/c/{DIGITS}".encode()),
        (None, claim.encode(), rng.randbytes(rng.randint(0, 200))),
        (None, None, rng.randbytes(rng.randint(0, 200))),
        (None, b"forged/tombstone", None),
    ]  # fmt: skip
    for until in (YEAR_10000_S, INT64_MAX, DIGITS):
        key = f"{g}/pause/{until}/forger/1".encode()
        out.append((None, key, f"ReleaseGroup/1/1/forger/{admin}/{g}//0/{until}".encode()))
    return out


def _extreme(partitions: int, admin: str) -> list[Landing]:
    """Well-formed records at the bounds, of an invented group, each on its home partition."""
    g, top = "forged", 2**31 - 1

    def home(topic: str, partition: int) -> int:
        return coordination_partition(topic, partition, partitions)

    return [
        (home("ft", top), f"{g}/ft/{top}/claim".encode(),
         f"ClaimingPartition/1/{LAST_SECOND}/i/c/{g}/ft/{top}".encode()),
        (home("ft", top), f"{g}/ft/{top}".encode(),
         f"Heartbeat/1/{LAST_SECOND}/i/c/{g}/ft/{top}/{INT64_MAX}".encode()),
        (home("ft", top), f"{g}/ft/{top}/poison".encode(),
         f"RecordFailed/1/1/i/c/{g}/ft/{top}/{INT64_MAX}/{INT64_MAX}/parked/e".encode()),
        *((p, f"{g}/pause/{LAST_SECOND}/forger/1".encode(),
           f"ReleaseGroup/1/1/forger/{admin}/{g}//0/{LAST_SECOND}".encode())
          for p in range(partitions)),
        *((p, f"{g}//settings".encode(),
           f"GroupSettings/1/{LAST_SECOND}/i/c/{g}/{YEAR_MS}/spec/*/key/1024".encode())
          for p in range(partitions)),
    ]  # fmt: skip


def _flood(partitions: int, count: int) -> list[Landing]:
    """``count`` valid claims of invented groups, each on its home partition."""
    out: list[Landing] = []
    for i in range(count):
        group, part = f"flood{i % FLOOD_GROUPS}", i // FLOOD_GROUPS
        key = f"{group}/ft/{part}/claim".encode()
        value = f"ClaimingPartition/1/1/i/forger/{group}/ft/{part}".encode()
        out.append((coordination_partition("ft", part, partitions), key, value))
    return out


def own_group_state(members: Iterable[tuple[str, str, Iterable[World]]]) -> list[str]:
    """Each (name, group, worlds) of a member whose fold keeps state of another group than its
    own (claims, pauses, settings, poison counts), as a line; empty: every member's memory is
    bounded by its own group."""
    found: list[str] = []
    for name, group, worlds in members:
        for world in worlds:
            groups = {k.group for k in world.claims} | {k.group for k in world.poison}
            groups |= set(world.pauses) | set(world.group_settings)
            others = sorted(groups - {group})
            if others:
                found.append(
                    f"{name} keeps state of {len(others)} other group(s) on coordination "
                    f"partition {world.partition} ({', '.join(others[:3])})"
                )
    return found
