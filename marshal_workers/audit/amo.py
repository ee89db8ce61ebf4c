"""At-most-once losses: reserved records nobody handled, and why (pure).

At most once, a member reserves each run of records in the log (ClaimingMessages) before its
child handles it, and heartbeats the reservation's end as its position right away
(`core/children`). Whoever holds the partition next resumes at the end of the last
reservation, so a reserved record that was not handled is never handled: it is lost, as
at-most-once allows, but only for a reason. The log does not say which reserved records were
handled; the ledger does. A child asks for its next run while it handles one (`child/grants`),
so when its holder stops without releasing, its last *two* reservations may be unhandled: the
*at-risk* span [at_risk_offset, end_offset) (`protocol.amolosses`, which `marshal-admin
status` uses on the same rule).

`amo_reserved` (built by `tables.Tables`, settled by `finalize.settle_reserved`) has one row per
claim interval that reserved: the span it reserved [first_offset, end_offset), its at-risk
span, its last commit, and how its holder's right ended. From it:

- with a ledger (`ledger_losses`, per data partition in `checks.check_partition`): every run
  of reserved offsets that no ledger row of the group handled is a loss. In the interval's
  at-risk span, the cause is how the interval ended: ``taken_over`` (the holder's lease
  expired, it crashed or stalled, and another member claimed), ``lease_expired`` (the same,
  nobody claimed before the end of the log), ``refused`` (the holder's commit came after its
  lease ended and the log refused it), ``replaced`` (a new instance of the holder took over: a
  restart), ``released_under_pause`` or ``released``; a holder that still holds its claim is
  still at work on its at-risk span (no loss yet). Before it, the holder went on past the
  run: the child it was reserved for ended before handling it (a crash, a handler that failed
  or outlived its timeout, a kill), or its member refused it (its lease ran out, an earlier
  run was refused): ``abandoned``, which the member reported itself (``amo_records_lost``).
  Its times are the run's own (`date_abandoned`): the reservation that covered its start, and
  the holder's first reservation past it, not the interval's end (a graceful stop may come
  hours later); only a claim's last run, which no reservation followed, keeps the interval's
  end as the latest it can have been lost. Nobody took it over: no successor.
- without a ledger (`log_losses`): what the log shows at risk: the at-risk span of an interval
  whose holder stopped without releasing (its child may not have finished it), and the
  reserved records above a release's offset. ``handled`` is null: nobody can tell.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from marshal_workers.audit.schema import columns
from marshal_workers.protocol.slicing import Ordering, Slice, records_at_most, split_topic

Row = tuple[Any, ...]

_R: Final = {name: i for i, name in enumerate(columns("amo_reserved"))}
CRASHES: Final = frozenset({"taken_over", "stale", "refused", "replaced"})
RELEASES: Final = frozenset({"released", "released_under_pause"})
_CAUSE: Final = {"stale": "lease_expired"}  # how an interval ended -> the cause of its loss
ABANDONED: Final = "abandoned"  # a run the holder went on past (module doc)
_RES: Final = {name: i for i, name in enumerate(columns("reservations"))}
_L: Final = {name: i for i, name in enumerate(columns("amo_losses"))}


def _cause(ended: object) -> str:
    return _CAUSE.get(str(ended), str(ended))


def _range(start: int | None, end: int) -> str:
    return f"[{start}, {end})" if start is not None else f"below {end} (start unknown)"


def detail(cause: str, row: Row, start: int | None, end: int, checked: bool = True) -> str:
    """One sentence on why the reserved records [start, end) of ``row`` were lost (``checked``:
    a ledger says nobody handled them), or, without a ledger, were put at risk."""
    client, successor = row[_R["client_id"]], row[_R["successor_client_id"]]
    lost = (
        f"{client} reserved {_range(start, end)} and nobody handled it"
        if checked
        else f"{client} reserved {_range(start, end)}, at risk (no ledger says whether its "
        "child handled it)"
    )
    after = f"the next owner resumed at {row[_R['end_offset']]}"
    if cause == "taken_over" and successor == client:  # the same client, after its lease
        return (
            f"{lost}: {client}'s lease expired (a freeze, a stall) and it claimed the "
            f"partition again itself; {after}"
        )
    if cause == "taken_over":
        return f"{lost}: {client}'s lease expired and {successor} claimed the partition; {after}"
    if cause == "lease_expired":
        return f"{lost}: {client} went silent and its lease expired before the end of the log"
    if cause == "replaced":
        return f"{lost}: a new instance of {client} took the claim over (restart); {after}"
    risk = row[_R["at_risk_offset"]]
    if cause == "refused" and row[_R["ended"]] == "refused" and (start or 0) >= (risk or 0):
        refused = row[_R["refused_offset"]]
        return (
            f"{lost}: {client}'s commit of {refused} came after its lease ended and the log "
            f"refused it; {after}"
        )
    if cause == ABANDONED:
        return (
            f"{lost}: {client} moved on past it (reserving or releasing beyond it), so the "
            "child it was reserved for ended first (a crash, a handler that failed or timed "
            "out, a kill) or its member refused it (its lease ran out); the member logged it "
            "as amo_records_lost with the cause"
        )
    if cause == "released_under_pause":
        return f"{lost}: {client} released the partition while the group was paused; {after}"
    return f"{lost}: {client} released the partition without handling it; {after}"


def _loss(row: Row, start: int | None, end: int, cause: str, handled: int | None) -> Row:
    r = row
    count = None if start is None else records_at_most(r[_R["topic"]], start, end)
    # an abandoned run was passed over by its own holder: nobody took it over
    successor = None if cause == ABANDONED else r[_R["successor_client_id"]]
    return (
        r[_R["group"]], r[_R["topic"]], r[_R["partition"]], r[_R["client_id"]],
        r[_R["instance_id"]], r[_R["token"]], start, end, count, handled, r[_R["reserved_ms"]],
        r[_R["end_ms"]], cause, successor,
        detail(cause, r, start, end, checked=handled is not None),
    )  # fmt: skip


def log_losses(reserved: Iterable[Row]) -> list[Row]:
    """Without a ledger: the reserved records the log shows at risk (module doc)."""
    out: list[Row] = []
    for r in reserved:
        ended, end = r[_R["ended"]], r[_R["end_offset"]]
        if r[_R["reserved_ms"]] is None:
            continue  # a new instance that reserved nothing: its predecessor's row has it
        if ended in CRASHES:
            out.append(_loss(r, r[_R["at_risk_offset"]], end, _cause(ended), None))
        elif ended in RELEASES:
            committed = r[_R["committed_offset"]]
            if committed is not None and committed < end:
                out.append(_loss(r, committed, end, _cause(ended), None))
    return out


def ledger_losses(
    reserved: Sequence[Row], handled: Mapping[str | None, set[int]] | set[tuple[str | None, int]]
) -> list[Row]:
    """With a ledger: the runs of reserved offsets of one data partition that no ledger row
    of the interval's group (or an older ledger's row, without a group) handled."""
    done: dict[str | None, set[int]] = {}
    if isinstance(handled, set):
        for group, offset in handled:
            done.setdefault(group, set()).add(offset)
    else:
        done = {g: set(v) for g, v in handled.items()}
    out: list[Row] = []
    for r in reserved:
        ended, end = r[_R["ended"]], r[_R["end_offset"]]
        if r[_R["reserved_ms"]] is None:
            continue  # a new instance that reserved nothing: its predecessor's row has it
        first, risk = r[_R["first_offset"]], r[_R["at_risk_offset"]]
        start = first if first is not None else risk
        if start is None:
            continue  # nothing known of where it started
        if ended in RELEASES:  # a release carries the end of what was handled
            risk = r[_R["committed_offset"]]
        elif ended == "still_held":
            end = risk if risk is not None else start  # its at-risk span is still at work
        mine = done.get(r[_R["group"]], set()) | done.get(None, set())
        run: int | None = None
        for offset in range(start, end + 1):
            if run is not None and offset == risk:  # a run across the at-risk span: cut there
                out.append(_loss(r, run, offset, ABANDONED, 0))
                run = None
            if offset < end and offset not in mine:
                if run is None:
                    run = offset
            elif run is not None:
                at_risk = risk is None or run >= risk  # an unknown start: all of it may be
                cause = _cause(ended) if at_risk else ABANDONED
                out.append(_loss(r, run, offset, cause, 0))
                run = None
    return out


def sliced_ledger_losses(
    reserved: Sequence[Row], handled: set[tuple[str | None, int]]
) -> list[Row]:
    """`ledger_losses` of one data partition's claims, whole or sliced: an ``unordered``
    stripe owes only its own offsets; a ``key`` slice's unhandled offsets may be any slice's
    (the log names no keys), so the ledger cannot tell which are its losses: it shows what the
    log puts at risk (`log_losses`, ``handled`` null), as without a ledger and as status does."""
    by_claim: dict[str, list[Row]] = defaultdict(list)
    for r in reserved:
        by_claim[str(r[_R["topic"]])].append(r)
    out: list[Row] = []
    for claim, rows in by_claim.items():
        part = split_topic(claim)[1]
        if part is None:
            out.extend(ledger_losses(rows, handled))
        elif part.ordering is Ordering.UNORDERED:
            out.extend(ledger_losses(rows, handled | _not_owed(rows, part)))
        else:
            out.extend(log_losses(rows))
    return out


def _not_owed(reserved: Sequence[Row], part: Slice) -> set[tuple[str | None, int]]:
    """The reserved offsets of a stripe that are other stripes' records, as (group, offset)."""
    out: set[tuple[str | None, int]] = set()
    for r in reserved:
        first = r[_R["first_offset"]]
        if first is None:
            first = r[_R["last_batch_offset"]]
        if first is None:
            continue
        group, end = r[_R["group"]], r[_R["end_offset"]]
        out.update((group, o) for o in range(first, end) if not part.takes(o, None))
    return out


def abandoned_claims(losses: Iterable[Row]) -> set[tuple[Any, ...]]:
    """The claims (group, topic, partition, client, instance, token) with an ``abandoned``
    loss: whose reservations `date_abandoned` needs."""
    return {tuple(r[:6]) for r in losses if r[_L["cause"]] == ABANDONED}


def date_abandoned(losses: Sequence[Row], reservations: Iterable[Row]) -> list[Row]:
    """``losses`` with each ``abandoned`` run's own times: ``reserved_ms`` of the reservation
    that covered its start, ``lost_ms`` of its holder's first reservation past it (rows of the
    ``reservations`` table; those of other claims are ignored). Where none followed (the run
    was the claim's last, passed over by its release) ``lost_ms`` stays the claim's end, the
    latest it can have been lost: the log does not say when the child ended. A run whose
    reservations are not all there (outside a ``--since``/``--until`` window) keeps what it
    has."""
    wanted = abandoned_claims(losses)
    mine: dict[tuple[Any, ...], list[Row]] = defaultdict(list)
    for r in reservations:
        claim = tuple(r[:6])
        if claim in wanted:
            mine[claim].append(r)
    out: list[Row] = []
    for loss in losses:
        start, end = loss[_L["start_offset"]], loss[_L["end_offset"]]
        if loss[_L["cause"]] != ABANDONED or start is None:
            out.append(loss)
            continue
        rows = mine.get(tuple(loss[:6]), [])
        covering = [int(r[_RES["log_time_ms"]]) for r in rows if _covers(r, start)]
        after = [
            int(r[_RES["log_time_ms"]])
            for r in rows
            if r[_RES["start_offset"]] is not None and r[_RES["start_offset"]] >= end
        ]
        dated = list(loss)
        if covering:
            dated[_L["reserved_ms"]] = max(covering)
        if after:
            dated[_L["lost_ms"]] = min(after)
        out.append(tuple(dated))
    return out


def _covers(reservation: Row, offset: int) -> bool:
    first = reservation[_RES["start_offset"]]
    return first is not None and first <= offset < reservation[_RES["end_offset"]]


def loss_order(row: Row) -> tuple[Any, ...]:
    """``amo_losses`` rows by group, topic, partition and first offset lost."""
    return (row[0], row[1], row[2], row[6] if row[6] is not None else -1, str(row))
