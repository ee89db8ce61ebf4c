"""Poison records in the coordination log: failure counts every member reads, parking, and the
operator's skip or retry. Pure: no I/O, no clock (the rationalizer calls `fold_poison`).

Theory of operation. A record whose handler keeps failing (ALO, ``on_failure`` stop: the child
stops before it, the next child tries it again) must not loop forever across releases and
members. So its failures are written where every member reads, the coordination log, in two
additive record types of the same text format as the others (version 1, never written by the
Go implementation, counted as malformed by a reader that does not know them)::

    RecordFailed/1/UnixSec/InstanceID/ClientID/GroupID/Topic/Partition/Offset/Failures/Outcome/Error
    PoisonResolved/1/UnixSec/InstanceID/ClientID/GroupID/Topic/Partition/Offset/Action

A count's record key is the claim key plus ``/poison`` (`poison_key`), a decision's the claim
key plus ``/poison/decision`` (`decision_key`), so compaction keeps the newest count and the
newest decision of each claim (next to, not instead of, the claim's newest record; a decision
the log refused can then never be all the cleaner leaves of the count: decisions shared the
counts' key until 2026-11-27, and a reader accepts them there from older logs); they go to the
claim's coordination partition, so they are folded in order with its claim records.
``Error`` is the last error, cut to `MAX_ERROR_CHARS`, with ``%``, ``/`` and control characters
percent-escaped (so no field ever contains ``/``); a longer field is malformed, as is any field
outside the bounds of the claim records (`wire`). ``Outcome`` is ``retry`` or ``parked``;
``Action`` is ``skip`` or ``retry``.

Rules of the fold (`fold_poison`; an input that breaks one changes nothing but its event):

1. RecordFailed is valid only from the claim's holder instance while its claim is not stale at
   the record's log time (a non-holder cannot write a failure). Its count is the fold's, not
   the writer's: one more than the state's if the state is on the same offset, else 1. The
   writer's outcome ``parked`` parks the record (the writer decides it from the same fold and
   its ``poison_park_after``).
2. PoisonResolved is valid only from an admin client (``admin_client_ids``; None: anyone) and
   only for the offset the state is on. ``retry`` sets the count to 0 and unparks; ``skip``
   unparks and marks the record skipped: the holder moves its position past it.
3. A state whose offset is below the claim's position is over (the record was handled, skipped
   or dead-lettered): `active` says so; nothing needs to delete it.
4. On an *uncertain* claim (its history may be compacted: see the rationalizer) the fold cannot
   tell who held it at the record, and the newest poison record of a claim survives the
   records that counted the failures before it and those that made its writer the holder.
   So a RecordFailed is taken as written: its count and outcome are the writer's, who
   computed them (`park_outcome`) from its own fold, which had the earlier count; and an
   admin's PoisonResolved applies only if the surviving count before it is on its offset (the
   newest count survives, so a count on another offset, or none, before the decision means
   the whole log refused it, or that a newer count follows it and decides; a decision under
   the counts' old shared key is judged the same way: a skip taken on a guess would skip a
   record). A count survives compaction (a reader that refused the surviving record would
   count from 1 again). The price: a count the whole log refuses (a stale or replaced
   writer's) counts for a compacted reader. On the same record that parks it early; on an
   older one (written after a rival counted the next record) it hides the rival's count, and
   that record is tried from 1 again. Members write no count past their own lease (decision
   19, `RecordParking.past_lease`), so what is left is a count that landed later than the
   lease's margin.

What members do with it (`park_outcome`, `poison_action`): after a stop-policy failure on
offset O the holder writes RecordFailed (``parked`` once the total reaches
``poison_park_after``); a member holding a claim whose active state is parked runs no child for
it (it keeps the claim and heartbeats its position) until an operator's PoisonResolved, or
``poison_park_time`` of log time after the parking (0: never) when it tries once more.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from marshal_workers.protocol import events as ev
from marshal_workers.protocol.fastinit import fast_init
from marshal_workers.protocol.wire import (
    MAX_NAME_CHARS,
    MAX_OFFSET,
    MAX_PARTITION,
    MAX_TOPIC_CHARS,
    MAX_UNIX_SEC,
    ClaimKey,
    DecodeError,
    validate_name,
)

MAX_ERROR_CHARS: Final = 200
SUFFIX: Final = "/poison"
DECISION_SUFFIX: Final = "/poison/decision"
MAX_ESCAPED_CHARS: Final = 3 * MAX_ERROR_CHARS  # `escape` writes at most 3 for each
VERSION: Final = 1


class Outcome(StrEnum):
    """What a RecordFailed says becomes of the record."""

    RETRY = "retry"  # the fleet goes on trying it (with back-off)
    PARKED = "parked"  # the configured total was reached: nobody tries until an operator says


class Action(StrEnum):
    """An operator's decision on a parked (or failing) record."""

    SKIP = "skip"
    RETRY = "retry"


@fast_init
@dataclass(frozen=True, slots=True)
class RecordFailed:
    """The holder's handler failed on data offset ``offset`` (``failures``: as the writer
    counted them; ``error``: the last error, unescaped)."""

    unix_sec: int
    instance_id: str
    client_id: str
    group_id: str
    topic: str
    partition: int
    offset: int
    failures: int
    outcome: Outcome
    error: str


@fast_init
@dataclass(frozen=True, slots=True)
class PoisonResolved:
    """An operator's ``action`` on the poison record at data offset ``offset``."""

    unix_sec: int
    instance_id: str
    client_id: str
    group_id: str
    topic: str
    partition: int
    offset: int
    action: Action


PoisonMessage = RecordFailed | PoisonResolved


@dataclass(frozen=True, slots=True)
class PoisonState:
    """What the log says about a claim's failing record."""

    offset: int
    failures: int
    parked: bool
    error: str
    client_id: str  # who last failed on it (or resolved it)
    log_time: int  # of the last record that changed it
    skipped: bool = False


# ---- events ----------------------------------------------------------------------------------


@fast_init
@dataclass(frozen=True, slots=True)
class PoisonVerdict(ev.Event):
    """A poison record and what the fold did with it."""

    message: PoisonMessage

    @property
    def key(self) -> ClaimKey:
        """The claim it is about."""
        return ClaimKey(self.message.group_id, self.message.topic, self.message.partition)


@fast_init
@dataclass(frozen=True, slots=True)
class PoisonNoted(PoisonVerdict):
    """A failure counted (``state`` after it)."""

    state: PoisonState


@fast_init
@dataclass(frozen=True, slots=True)
class PoisonCleared(PoisonVerdict):
    """An operator's skip or retry taken (``state`` after it)."""

    state: PoisonState


@fast_init
@dataclass(frozen=True, slots=True)
class PoisonRejected(PoisonVerdict):
    """Refused: the state is unchanged."""

    reason: str


# ---- wire format -----------------------------------------------------------------------------


def poison_key(key: ClaimKey) -> bytes:
    """The record key of a claim's poison records."""
    return f"{key.group}/{key.topic}/{key.partition}{SUFFIX}".encode()


def decision_key(key: ClaimKey) -> bytes:
    """The record key of the operators' decisions on a claim's poison records."""
    return f"{key.group}/{key.topic}/{key.partition}{DECISION_SUFFIX}".encode()


def poison_record_key(msg: PoisonMessage) -> bytes:
    """The record key ``msg`` is written under: a count under `poison_key`, a decision under
    `decision_key` (so that a refused decision, which may be its key's newest record, never
    leaves the cleaner nothing of the count)."""
    key = ClaimKey(msg.group_id, msg.topic, msg.partition)
    return poison_key(key) if isinstance(msg, RecordFailed) else decision_key(key)


def accepted_keys(msg: PoisonMessage) -> tuple[bytes, ...]:
    """The record keys a reader accepts ``msg`` under: its own, and for a decision also the
    counts' key, under which decisions were written before they had one of their own."""
    key = ClaimKey(msg.group_id, msg.topic, msg.partition)
    if isinstance(msg, RecordFailed):
        return (poison_key(key),)
    return (decision_key(key), poison_key(key))


def escape(text: str) -> str:
    """Cut to `MAX_ERROR_CHARS` and percent-escape ``%``, ``/`` and control characters."""
    cut = text[:MAX_ERROR_CHARS]
    return "".join(f"%{ord(c):02X}" if c in "%/" or not c.isprintable() else c for c in cut)


def unescape(text: str) -> str:
    """The inverse of `escape` (DecodeError on a broken escape)."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "%":
            code = text[i + 1 : i + 3]
            if len(code) != 2 or not all(h in "0123456789ABCDEF" for h in code):
                raise DecodeError(f"bad escape {text[i : i + 3]!r} in Error")
            out.append(chr(int(code, 16)))  # escape only writes code points below 0x100
            i += 3
        else:
            out.append(c)
            i += 1
    return "".join(out)


def encode_poison(msg: PoisonMessage) -> bytes:
    """The text form of a poison message."""
    base = (
        f"{type(msg).__name__}/{VERSION}/{msg.unix_sec}/{msg.instance_id}/{msg.client_id}/"
        f"{msg.group_id}/{msg.topic}/{msg.partition}/{msg.offset}"
    )
    if isinstance(msg, RecordFailed):
        return f"{base}/{msg.failures}/{msg.outcome}/{escape(msg.error)}".encode()
    return f"{base}/{msg.action}".encode()


def _int(field: str, text: str, maximum: int = MAX_OFFSET) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        raise DecodeError(f"{field} {text[:24]!r} is not a non-negative 64-bit integer")
    value = int(text)
    if value > maximum:
        raise DecodeError(f"{field} {text!r} is out of range (at most {maximum})")
    return value


def _name(field: str, text: str, limit: int = MAX_NAME_CHARS) -> str:
    try:
        return validate_name(field, text, limit)
    except ValueError as exc:
        raise DecodeError(str(exc)) from None


def is_poison(value: bytes | None) -> bool:
    """Whether a record value is (meant to be) a poison message."""
    return value is not None and value.startswith((b"RecordFailed/", b"PoisonResolved/"))


def decode_poison(value: bytes) -> PoisonMessage:
    """Parse a poison message strictly; DecodeError saying what is wrong."""
    try:
        parts = value.decode("utf-8").split("/")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"value is not UTF-8 ({exc.reason})") from None
    kind = parts[0]
    expected = {"RecordFailed": 12, "PoisonResolved": 10}.get(kind)
    if expected is None:
        raise DecodeError(f"not a poison message: {kind[:40]!r}")
    if len(parts) != expected:
        raise DecodeError(f"{kind} needs {expected} '/'-separated fields, got {len(parts)}")
    if parts[1] != str(VERSION):
        raise DecodeError(f"unsupported version {parts[1][:20]!r} of {kind}")
    fields = (
        _int("UnixSec", parts[2], MAX_UNIX_SEC),
        _name("InstanceID", parts[3]),
        _name("ClientID", parts[4]),
        _name("GroupID", parts[5]),
        _name("Topic", parts[6], MAX_TOPIC_CHARS),
        _int("Partition", parts[7], MAX_PARTITION),
        _int("Offset", parts[8]),
    )
    try:
        if kind == "RecordFailed":
            if len(parts[11]) > MAX_ESCAPED_CHARS:
                raise DecodeError(f"Error is longer than {MAX_ESCAPED_CHARS} characters")
            return RecordFailed(
                *fields, _int("Failures", parts[9]), Outcome(parts[10]), unescape(parts[11])
            )
        return PoisonResolved(*fields, Action(parts[9]))
    except ValueError as exc:
        if isinstance(exc, DecodeError):
            raise
        raise DecodeError(f"{kind}: {str(exc)[:80]}") from None


# ---- the fold --------------------------------------------------------------------------------


def fold_poison(
    poison: dict[ClaimKey, PoisonState],
    msg: PoisonMessage,
    *,
    coord_partition: int,
    coord_offset: int,
    log_time: int,
    holder_client: str | None,
    holder_instance: str | None,
    last_seen: int | None,
    heartbeat_interval_ms: int,
    admin_client_ids: frozenset[str] | None,
    certain: bool = True,
) -> ev.Event:
    """Apply one poison message to ``poison`` (the claim's holder as the fold knows it at the
    record's log time; ``certain`` False: the claim's history may be compacted, see rule 4);
    the event says what it did (see the module's rules)."""
    key = ClaimKey(msg.group_id, msg.topic, msg.partition)
    where = (coord_partition, coord_offset, log_time)
    state = poison.get(key)
    if not certain:
        return _fold_uncertain(poison, key, msg, where, state, admin_client_ids)
    if isinstance(msg, RecordFailed):
        refusal = None
        if holder_client != msg.client_id or holder_instance != msg.instance_id:
            refusal = f"not the holder (held by {holder_client}/{holder_instance})"
        elif last_seen is None or log_time - last_seen > 2 * heartbeat_interval_ms:
            refusal = "claim is stale"
        if refusal is not None:
            return PoisonRejected(*where, msg, refusal)
        same = state is not None and state.offset == msg.offset
        failures = (state.failures if same and state else 0) + 1
        new = PoisonState(
            msg.offset,
            failures,
            msg.outcome is Outcome.PARKED,
            msg.error,
            msg.client_id,
            log_time,
        )
        poison[key] = new
        return PoisonNoted(*where, msg, new)
    return _decide(poison, key, msg, where, state, admin_client_ids)


def admin_refusal(client_id: str, admin_client_ids: frozenset[str] | None) -> str | None:
    """Why ``client_id`` may not decide on a poison record (None: it may)."""
    if admin_client_ids is not None and client_id not in admin_client_ids:
        return f"{client_id} is not an admin client"
    return None


def offset_refusal(state: PoisonState | None, offset: int) -> str | None:
    """Why a decision on ``offset`` finds nothing to resolve in ``state`` (None: it applies)."""
    if state is not None and state.offset == offset:
        return None
    on = "no failing record" if state is None else f"the failing record is {state.offset}"
    return f"nothing to resolve at {offset}: {on}"


def _decide(
    poison: dict[ClaimKey, PoisonState],
    key: ClaimKey,
    msg: PoisonResolved,
    where: tuple[int, int, int],
    state: PoisonState | None,
    admin_client_ids: frozenset[str] | None,
) -> ev.Event:
    """Rule 2 (and rule 4: on an uncertain claim the same, see `_fold_uncertain`): an admin's
    decision applies to the offset of the count the fold has, and only to it."""
    refusal = admin_refusal(msg.client_id, admin_client_ids) or offset_refusal(state, msg.offset)
    if refusal is not None or state is None:
        return PoisonRejected(*where, msg, refusal or "no failing record")
    skip = msg.action is Action.SKIP
    new = PoisonState(
        state.offset,
        state.failures if skip else 0,
        False,
        state.error,
        msg.client_id,
        where[2],
        skipped=skip,
    )
    poison[key] = new
    return PoisonCleared(*where, msg, new)


def _fold_uncertain(
    poison: dict[ClaimKey, PoisonState],
    key: ClaimKey,
    msg: PoisonMessage,
    where: tuple[int, int, int],
    state: PoisonState | None,
    admin_client_ids: frozenset[str] | None,
) -> ev.Event:
    """Rule 4: on a claim whose history may be compacted the writer cannot be checked, and
    the newest count of the claim survives while the failures it counted, and the grant and
    heartbeats that made its writer the holder, may not: a RecordFailed is taken as written
    (its count and outcome are its writer's, who counted them on its own fold). An admin's
    PoisonResolved applies only to the offset the surviving count is on, as on a certain claim:
    the newest count survives beside the newest decision, so a count on another offset, or
    none before it, means the whole log refused it, or that a newer count follows and
    decides. A decision under the counts' key (before decisions had their own) may be all
    that is left of them and valid; it is refused too: a skip taken on a guess would skip a
    record in ALO, and a refused retry only lets the record be tried again."""
    if isinstance(msg, RecordFailed):
        new = PoisonState(
            msg.offset,
            max(1, msg.failures),
            msg.outcome is Outcome.PARKED,
            msg.error,
            msg.client_id,
            where[2],
        )
        poison[key] = new
        return PoisonNoted(*where, msg, new)
    return _decide(poison, key, msg, where, state, admin_client_ids)


# ---- what members and operators make of it -----------------------------------------------------


def active(state: PoisonState | None, position: int | None) -> PoisonState | None:
    """The state if it still matters at the claim's ``position`` (None: unknown position)."""
    if state is None or (position is not None and position > state.offset):
        return None
    return state


def park_outcome(state: PoisonState | None, offset: int, park_after: int) -> tuple[int, Outcome]:
    """The count and outcome a holder writes after one more failure on ``offset``
    (``park_after`` 0: never park)."""
    same = state is not None and state.offset == offset
    failures = (state.failures if same and state else 0) + 1
    parked = park_after > 0 and failures >= park_after
    return failures, Outcome.PARKED if parked else Outcome.RETRY


class Step(StrEnum):
    """What a holder does about a claim's poison state."""

    RUN = "run"  # nothing in the way: run the child
    PARK = "park"  # parked: run no child
    SKIP = "skip"  # an operator skipped it: move the position past it, then run


def poison_action(
    state: PoisonState | None, position: int | None, now_ms: int, park_time_ms: int
) -> Step:
    """What the holder of a claim at ``position`` does at log time ``now_ms``."""
    current = active(state, position)
    if current is None:
        return Step.RUN
    if current.skipped:
        return Step.SKIP
    if current.parked and not (park_time_ms > 0 and now_ms - current.log_time >= park_time_ms):
        return Step.PARK
    return Step.RUN
