"""The whole, uncompacted coordination log of a simulated run folded once at its end: the
reference every member's fold is judged against (`fold_agreement`), the poison failures it
counted (`poison_bounded`), the operators' decisions and retries (`retry_heeded`), and the
AMO losses the log shows (`amo_loss_reported`).
"""

from __future__ import annotations

from collections import defaultdict

from marshal_workers.protocol.amolosses import AmoLosses
from marshal_workers.protocol.placement import PlacementBook
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.recordfailures import (
    Action,
    PoisonCleared,
    PoisonNoted,
    PoisonResolved,
)
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.sim.faults import ADMIN
from marshal_workers.sim.fleetview import FleetView


def fold_whole_log(
    fleet: FleetView,
) -> tuple[dict[int, World], dict[tuple[ClaimKey, int, int], dict[str, int]]]:
    """The whole, uncompacted log folded (the reference), each member's snapshot judged
    against it at the snapshot's offset on the way, and the poison failures it counted
    per record, epoch (the operator's retries of the record before it) and writer instance.

    A failure is counted once however often the log counted it: a member writes the same
    RecordFailed again when told its write failed (`RecordParking.gave_up`), and a write
    that timed out may have landed too, so the fold counts that one attempt twice (the
    record is parked no later). `poison_bounded` bounds attempts, so a landing of bytes
    written again is not one more failure: counting it would let a duplicate hide a lost
    count from the per-member check, and flag a record tried only ``park_after`` times
    (seeds 143, 146 of the all-faults mix). But two distinct failures can have the very
    same bytes (counted from a fold that had not yet seen the first, in the same second,
    after an operator's retry: seed 749 of the all-faults mix, 41020, 65007), so the
    landings of one writer's bytes count up to the number of failures it wrote with them
    (`failures_written`), in log order."""
    reference = {q: World(reference_config(fleet), q) for q in range(fleet.log.num_partitions)}
    losses = AmoLosses(int(fleet.p.heartbeat_interval * 1000), keep=True)
    noted: dict[tuple[ClaimKey, int, int], dict[str, int]] = defaultdict(dict)
    landings: dict[tuple[str, bytes], int] = defaultdict(int)  # (writer, record value)
    epochs: dict[tuple[ClaimKey, int], int] = defaultdict(int)  # operator retries so far
    retried: dict[tuple[ClaimKey, int], int] = {}  # log time of a retry not yet tried
    end_ms = 0
    for q, records in enumerate(fleet.log.shadow):
        mine = [(w.next_offset, label, at, w) for label, at, w in fleet.snapshots]
        due = sorted((s for s in mine if s[3].partition == q), key=lambda s: s[0])
        for record in records:
            while due and due[0][0] <= record.offset:  # the reference at the snapshot's offset
                _, label, at, world = due.pop(0)
                fleet.checker.agree(label, world, reference[q], at)
            event = fold(reference[q], record)
            losses.add(event)
            end_ms = max(end_ms, record.timestamp_ms)
            if isinstance(event, PoisonCleared):  # an operator's decision: counted afresh
                epochs[(event.key, event.message.offset)] += 1
                decided = event.message
                if isinstance(decided, PoisonResolved) and decided.action is Action.SKIP:
                    fleet.checker.skipped.add((event.key, decided.offset))
                if isinstance(decided, PoisonResolved) and decided.action is Action.RETRY:
                    retried[(event.key, event.message.offset)] = record.timestamp_ms
            elif isinstance(event, PoisonNoted):
                cleared = retried.pop((event.key, event.message.offset), None)
                if cleared is not None:
                    fleet.checker.retry_tried(event.key, cleared, record.timestamp_ms)
                epoch = epochs[(event.key, event.message.offset)]
                writer = (event.message.instance_id, record.value or b"")
                landings[writer] += 1
                if landings[writer] > fleet.failures_written.get(writer, 0):
                    continue  # the same failure written again: one attempt
                by = noted[(event.key, event.message.offset, epoch)]
                by[event.message.instance_id] = by.get(event.message.instance_id, 0) + 1
        for _, label, at, world in due:  # read to the end
            fleet.checker.agree(label, world, reference[q], at)
    for (key, _), cleared in retried.items():  # never tried again (by the end)
        fleet.checker.retry_tried(key, cleared, None, end_ms)
    fleet.log_losses = losses.every(end_ms)  # what `marshal-admin status` would show
    # and once the holders that write no more have been silent for 2*HB (nobody writes after
    # the end): a holder that let its claim go in the run's last turns crashed to the log
    fleet.settled_losses = losses.every(end_ms + 2 * losses.hb + 1)
    return reference, noted


def reference_config(fleet: FleetView) -> RationalizerConfig:
    """The rationalizer's settings every member of the run folds with."""
    return RationalizerConfig(
        int(fleet.p.heartbeat_interval * 1000),
        num_partitions=fleet.p.coordination_partitions,
        admin_client_ids=frozenset({ADMIN}),
        placements=PlacementBook.of(fleet.placements),  # every placed group's (the audit's view)
    )
