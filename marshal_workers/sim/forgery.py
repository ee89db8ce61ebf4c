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

The invariant ``no_crash`` judges it (no record makes a member's core, or the whole-log reader,
raise: `scenario.run_seed` reports any exception of a run as a violation), and every other
invariant must hold as ever: the forged records change nothing of the fleet's. The contents
are drawn from a generator of their own, so the fleet's draws stay as they were.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Final

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
    landings = [*_malformed(rng, groups, admin), *_extreme(n, admin), *_flood(rng, n)]
    for partition, key, value in landings:
        where = rng.randrange(n) if partition is None else partition
        log.land(where, key, value, t)  # type: ignore[arg-type]
    return len(landings)


def _malformed(rng: random.Random, groups: Sequence[str], admin: str) -> list[Landing]:
    g = rng.choice(list(groups))
    claim = f"{g}/t{g}/0"
    big = "x" * 100_000
    out: list[Landing] = [
        (None, claim.encode(), f"Heartbeat/1/{DIGITS}/i/c/{g}/t{g}/0/5".encode()),
        (None, claim.encode(), f"Heartbeat/1/1/i/c/{g}/t{g}/0/{DIGITS}".encode()),
        (None, f"{claim}/claim".encode(), f"ClaimingPartition/1/1/i/c/{g}/t{g}/{DIGITS}".encode()),
        (None, claim.encode(), f"ReleasingPartition/1/1/i/c/{g}/t{g}/0/{DIGITS}".encode()),
        (None, claim.encode(), f"ClaimingMessages/1/{DIGITS}/i/c/{g}/t{g}/0/9".encode()),
        (None, f"{claim}/claim".encode(), f"ClaimingPartition/1/1/{big}/c/{g}/t{g}/0".encode()),
        (None, f"{claim}/poison".encode(),
         f"RecordFailed/1/1/i/c/{g}/t{g}/0/0/1/parked/{big}".encode()),
        (None, f"{g}//settings".encode(), f"GroupSettings/1/1/i/c/{g}/{10**17}/spec/*".encode()),
        (0, b"/coordination-topic", f"CoordinationTopic/1/1/i/c/{DIGITS}".encode()),
        (None, claim.encode(), rng.randbytes(rng.randint(0, 200))),
        (None, None, rng.randbytes(rng.randint(0, 200))),
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


def _flood(rng: random.Random, partitions: int) -> list[Landing]:
    """Valid claims of invented groups, each on its home partition."""
    out: list[Landing] = []
    for i in range(rng.randint(100, 400)):
        group, part = f"flood{i % FLOOD_GROUPS}", i // FLOOD_GROUPS
        key = f"{group}/ft/{part}/claim".encode()
        value = f"ClaimingPartition/1/1/i/forger/{group}/ft/{part}".encode()
        out.append((coordination_partition("ft", part, partitions), key, value))
    return out
