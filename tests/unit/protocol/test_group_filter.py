"""A reader that folds one group in full (a member, `status --group`): other groups' records are
counted, never kept, and its view of its own group is the whole-topic fold's, exactly."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from marshal_workers.protocol import events as ev
from marshal_workers.protocol.metadata import (
    GroupSettings,
    TopicRecord,
    encode_metadata,
    metadata_key,
)
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.recordfailures import (
    Action,
    Outcome,
    PoisonResolved,
    RecordFailed,
    encode_poison,
    poison_record_key,
)
from marshal_workers.protocol.wire import (
    ClaimingMessages,
    ClaimingPartition,
    CoordRecord,
    Heartbeat,
    Partitioner,
    ReleaseGroup,
    ReleasingPartition,
    encode,
    legacy_pause_keys,
    record_key,
)

HB = 1000
GROUPS = ("g", "h", "gg")  # "gg" starts like "g": a prefix is not a group
MINE = "g"
PROPERTY = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def records(draw: st.DrawFn) -> list[CoordRecord]:
    """A coordination partition of several groups: claims, heartbeats, releases, reservations,
    pauses (also under their legacy keys), settings, poison counts and decisions, the pinned
    count, keyless and garbage records; log time mostly forward, sometimes back; offsets with
    gaps now and then (what the cleaner leaves)."""
    out: list[CoordRecord] = []
    offset, t = 0, 0
    for _ in range(draw(st.integers(1, 40))):
        group = draw(st.sampled_from(GROUPS))
        client = draw(st.sampled_from(["a", "b"]))
        inst = f"{client}-{draw(st.integers(1, 2))}"
        part = draw(st.integers(0, 1))
        at = draw(st.integers(0, 30))
        kind = draw(
            st.sampled_from(
                ["claim", "claim", "hb", "hb", "release", "reserve", "pause", "legacy-pause",
                 "settings", "pin", "failed", "resolved", "keyless", "garbage", "foreign-key"]
            )
        )  # fmt: skip
        key: bytes | None
        value: bytes | None
        if kind in ("claim", "hb", "release", "reserve", "keyless", "foreign-key"):
            msg = {
                "claim": ClaimingPartition(0, inst, client, group, "t", part),
                "hb": Heartbeat(0, inst, client, group, "t", part, at),
                "release": ReleasingPartition(0, inst, client, group, "t", part, at),
                "reserve": ClaimingMessages(0, inst, client, group, "t", part, at),
            }.get(kind, Heartbeat(0, inst, client, group, "t", part, at))
            value = encode(msg)
            key = record_key(msg)
            if kind == "keyless":
                key = None
            elif kind == "foreign-key":  # another group's key on this message: malformed
                key = record_key(replace(msg, group_id=draw(st.sampled_from(GROUPS))))
        elif kind in ("pause", "legacy-pause"):
            pause = ReleaseGroup(t // 1000, inst, client, group, "", 0, t // 1000 + at % 5)
            value = encode(pause)
            key = record_key(pause) if kind == "pause" else legacy_pause_keys(pause)[part]
        elif kind == "settings":
            meta = GroupSettings(0, inst, client, group, HB * (1 + at % 2), Partitioner.SPEC, None)
            key, value = metadata_key(meta), encode_metadata(meta)
        elif kind == "pin":
            pin = TopicRecord(0, inst, client, 1 + at % 3)
            key, value = metadata_key(pin), encode_metadata(pin)
        elif kind in ("failed", "resolved"):
            poison = (
                RecordFailed(0, inst, client, group, "t", part, at, 1, Outcome.RETRY, "e")
                if kind == "failed"
                else PoisonResolved(0, inst, client, group, "t", part, at, Action.RETRY)
            )
            key, value = poison_record_key(poison), encode_poison(poison)
        else:
            key = draw(st.sampled_from([b"", b"g", b"g/", b"/x", b"gg/t/0", None]))
            value = draw(st.binary(max_size=20))
        t = max(0, t + draw(st.sampled_from([0, 1, HB // 2, HB, 2 * HB + 1, 3 * HB, -HB])))
        offset += draw(st.sampled_from([1, 1, 1, 1, 2, 5]))
        out.append(CoordRecord(0, offset, t, key, value))
    return out


def _group_of_key(key: bytes | None) -> str | None:
    """The group a record key names (None: the key names none: keyless, or ``/...``)."""
    if key is None or key.startswith(b"/"):
        return None
    return key.split(b"/", 1)[0].decode(errors="replace")


@PROPERTY
@given(records())
def test_a_group_filtered_fold_is_the_whole_folds_view_of_its_group(log: list[CoordRecord]) -> None:
    """Folded with ``only_group``, a world holds its group's claims, pause, settings and
    poison counts exactly as the whole fold does, the partition's log time, gaps and pin too,
    and nothing of any other group; each record of its group (or of none) gets the same
    verdict, each other group's record is counted."""
    config = RationalizerConfig(HB, admin_client_ids=frozenset({"a"}))
    whole, mine = World(config, 0), World(replace(config, only_group=MINE), 0)
    for record in log:
        full, filtered = fold(whole, record), fold(mine, record)
        named = _group_of_key(record.key)
        if named is None or named == MINE:
            assert filtered == full
        else:
            assert isinstance(filtered, ev.OtherGroup)
    assert mine.claims == {k: s for k, s in whole.claims.items() if k.group == MINE}
    assert mine.poison == {k: s for k, s in whole.poison.items() if k.group == MINE}
    assert mine.pauses == {g: p for g, p in whole.pauses.items() if g == MINE}
    assert mine.group_settings == {g: s for g, s in whole.group_settings.items() if g == MINE}
    assert (mine.topic_record, mine.next_offset, mine.log_time) == (
        whole.topic_record,
        whole.next_offset,
        whole.log_time,
    )
    assert (mine.gap_seen, mine.gap_time) == (whole.gap_seen, whole.gap_time)
    others = sum(1 for r in log if _group_of_key(r.key) not in (None, MINE))
    assert mine.other_groups == others
    assert whole.other_groups == 0


def test_a_flood_of_other_groups_claims_leaves_a_filtered_world_empty() -> None:
    """200,000 valid claims of 1,000 invented groups: the filtered world keeps none of them
    (a count), the whole fold keeps them all."""
    config = RationalizerConfig(HB)
    whole, mine = World(config, 0), World(replace(config, only_group=MINE), 0)
    for i in range(200_000):
        msg = ClaimingPartition(1, "i", "forger", f"forged{i % 1000}", "ft", i // 1000)
        record = CoordRecord(0, i, 1_000, record_key(msg), encode(msg))
        fold(whole, record)
        fold(mine, record)
    assert len(whole.claims) == 200_000
    assert mine.claims == {} and mine.keys == {} and mine.other_groups == 200_000
