"""`dump --group` of a group moved from one placed window to another.

The group's home keeps its claims' records from before the move (until the cleaner). Placed
settings were accepted there before them, so the fold (a member's too) granted them, by the
old placement: `dump --group` showed them as `ClaimGranted` among the live records, and the
docs said they showed `Malformed` (true only of a group moved from spread, whose old records
name no placement). The verdicts stay the fold's; each such record says it is left over from
before the move and where its claim's home is now.
"""

from __future__ import annotations

import json

from marshal_workers.admin.dump import dump_entry, dump_line, home_now
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.wire import CoordRecord
from tests.unit.protocol.test_amo_losses_after_move import AFTER, BEFORE, NEW, moved


def dumped() -> list[tuple[CoordRecord, ev.Event, int | None]]:
    log = moved()
    out = []
    for p, events in log.events.items():
        for offset, event in enumerate(events):
            record = CoordRecord(p, offset, event.log_time, None, None)
            out.append((record, event, home_now(record, event, NEW)))
    return out


def test_pre_move_claims_on_the_old_home_are_noted_as_left_over() -> None:
    """Every claim verdict on the old home (its claim, heartbeats, reservations, release) is
    noted with the claim's home now; none on the new home, nor the settings and pauses."""
    rows = dumped()
    noted = [(r.partition, type(e).__name__, at) for r, e, at in rows if at is not None]
    claims_before = [
        (r.partition, type(e).__name__)
        for r, e, _ in rows
        if r.partition == BEFORE and isinstance(e, ev.ClaimVerdict)
    ]
    assert claims_before and ("ClaimGranted" in {name for _, name in claims_before})
    assert noted == [(p, name, AFTER) for p, name in claims_before]
    assert not any(
        at is not None
        for r, e, at in rows
        if r.partition == AFTER or not isinstance(e, ev.ClaimVerdict)
    )


def test_the_note_in_the_line_and_the_json() -> None:
    """The text line ends with the note; the JSON has it in ``note`` (absent otherwise)."""
    rows = dumped()
    record, event, at = next(row for row in rows if row[2] is not None)
    line = dump_line(record, event, at)
    assert line.endswith(
        f"-> ClaimGranted (left over from before the group's move: the claim's home is "
        f"partition {AFTER} now)"
    )
    entry = dump_entry(record, event, at)
    assert entry["verdict"] == "ClaimGranted" and str(entry["note"]).startswith("left over")
    assert json.loads(json.dumps(entry)) == entry
    live, live_event, none = next(row for row in rows if row[0].partition == AFTER)
    assert none is None and "note" not in dump_entry(live, live_event)


def test_a_spread_group_is_never_noted() -> None:
    """No placement located (a spread group): nothing is left over."""
    rows = dumped()
    assert all(home_now(r, e, None) is None for r, e, _ in rows)
