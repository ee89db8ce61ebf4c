"""How a member locates its group before it folds (`supervisor.placement`), on a memory log."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest

from marshal_workers.common.errors import EXIT_COORDINATION_CHANGED, ConfigError, MarshalError
from marshal_workers.config.runconfig import RunConfig
from marshal_workers.fleet.groupcheck import ensure_group_settings
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.memlog import MemoryLog, MemoryTopic
from marshal_workers.protocol.metadata import (
    METADATA_PARTITION,
    TOPIC_RECORD_KEY,
    GroupSettings,
    TopicRecord,
    encode_metadata,
    metadata_key,
    settings_key,
    settings_records,
)
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.placement import Placement, home, placed, reads
from marshal_workers.protocol.wire import Heartbeat, ReleaseGroup, encode, record_key
from marshal_workers.supervisor.placement import auto_span, locate_member_group
from marshal_workers.supervisor.runtime import member_settings

N = 8
G = "shop.billing"
AT = home(G, N)  # 3
CONFIG = RunConfig(handler="m:h", mode=Mode.ALO, topics=("orders",), group=G, client_id="a",
                   heartbeat_interval=1.0)  # fmt: skip


def topic(pin: TopicRecord | None) -> MemoryTopic:
    ticks = itertools.count(1_700_000_000_000, 5)
    t = MemoryTopic(N, lambda: next(ticks))
    if pin is not None:
        t.append(METADATA_PARTITION, TOPIC_RECORD_KEY, encode_metadata(pin))
    return t


V1, V2 = TopicRecord(0, "i", "init", N), TopicRecord(0, "i", "init", N, placed=True)


def settings(placement: Placement | None, client: str = "b") -> GroupSettings:
    return GroupSettings(1, f"{client}-1", client, G, 1000, CONFIG.partitioner,
                         CONFIG.admin_client_ids, placement=placement)  # fmt: skip


def locate(t: MemoryTopic, config: RunConfig = CONFIG, claims: int = 5) -> Placement | None:
    log = MemoryLog(t)
    found = locate_member_group(log, config, claims, 5.0)
    return found


class TestCreation:
    def test_a_new_group_on_a_version_2_topic_is_placed_at_its_home(self) -> None:
        """No record of the group: placed settings are written on home, span auto (1): without
        the mode first (a reader from before modes reads them), then with it."""
        t = topic(V2)
        assert locate(t) == placed(G, N, 1)
        plain, moded = t.read(AT, 0)
        for record in (plain, moded):
            assert record.key is not None and record.key.startswith(f"{G}//settings/".encode())
        assert moded.key == plain.key + b"/alo" and (moded.value or b"").endswith(b"/alo")
        assert sum(len(t.read(p, 0)) for p in range(N)) == 3  # those and the topic record

    def test_a_new_group_on_a_version_1_topic_is_spread(self) -> None:
        """A version-1 topic (or one without a record) keeps new groups spread: nothing written."""
        for pin in (V1, None):
            t = topic(pin)
            assert locate(t) is None
            assert sum(len(t.read(p, 0)) for p in range(N)) == (0 if pin is None else 1)

    @pytest.mark.parametrize("where", [AT, METADATA_PARTITION, (AT + 3) % N])
    def test_a_group_with_records_from_before_is_spread(self, where: int) -> None:
        """Any record of the group (a heartbeat on home, on partition 0 or elsewhere) on a
        version-2 topic: spread (home's and partition 0's records were once never examined)."""
        t = topic(V2)
        beat = Heartbeat(1, "x-1", "x", G, "orders", 0, 5)
        t.append(where, record_key(beat), encode(beat))
        assert locate(t) is None

    @pytest.mark.parametrize("where", [AT, METADATA_PARTITION, (AT + 2) % N])
    def test_a_keyless_record_naming_the_group_is_a_group_from_before(self, where: int) -> None:
        """A keyless (Marshal Go) record of the group, wherever it is: spread, where the member
        refuses it (exit 5)."""
        t = topic(V2)
        beat = Heartbeat(1, "go-1", "go", G, "orders", 0, 5)
        t.append(where, None, encode(beat))  # type: ignore[arg-type]
        assert locate(t) is None

    def test_a_pause_alone_leaves_the_group_new(self) -> None:
        """`release-group --new-group` before the first member starts: its pauses on every
        partition are no record of a group from before (a pause holds no claim), so the group
        is placed, and its member sees the pause on home. They made it spread (a review)."""
        t = topic(V2)
        pause = ReleaseGroup(1, "admin-i", "marshal-admin", G, "", 0, 10**9)
        for q in range(N):
            t.append(q, record_key(pause), encode(pause))
        assert locate(t) == placed(G, N, 1)

    def test_another_group_s_records_do_not_count(self) -> None:
        """Records of other groups whose names start like it (keyed and keyless), on every
        partition home and 0 included, leave the group new."""
        t = topic(V2)
        for other in (G + "x", G + ".x", G[:-1]):
            for q in range(N):
                beat = Heartbeat(1, "x-1", "x", other, "orders", 0, 5)
                t.append(q, record_key(beat), encode(beat))
                t.append(q, None, encode(beat))  # type: ignore[arg-type]
        assert locate(t) == placed(G, N, 1)

    def test_a_new_group_on_a_topic_of_another_count_than_recorded_is_exit_4(self) -> None:
        """The topic's count differs from its record's (pinned at init): exit 4, nothing written,
        as for a spread group (a new group was once created placed for the new count)."""
        t = topic(replace(V2, partitions=N - 2))
        with pytest.raises(MarshalError) as caught:
            locate(t)
        assert caught.value.exit_code == EXIT_COORDINATION_CHANGED
        assert sum(len(t.read(p, 0)) for p in range(N)) == 1

    def test_a_group_placed_for_another_count_is_refused_before_anything_is_written(
        self,
    ) -> None:
        """After a count change and repin, the group's placed settings sit where home was for
        the old count: exit 4 with what to do, nothing written (it once wrote spread settings
        on every partition, then exited 2)."""
        t = topic(V2)
        old_n = 6  # home(G, 6) is 1, not home(G, 8)
        old = settings(placed(G, old_n, 1))
        t.append(home(G, old_n), metadata_key(old), encode_metadata(old))
        beat = Heartbeat(1, "b-1", "b", G, "orders", 0, 5)
        t.append(home(G, old_n), record_key(beat), encode(beat))
        before = sum(len(t.read(p, 0)) for p in range(N))
        with pytest.raises(MarshalError) as caught:
            locate(t)
        assert caught.value.exit_code == EXIT_COORDINATION_CHANGED
        assert f"placed for {old_n}" in str(caught.value)
        assert sum(len(t.read(p, 0)) for p in range(N)) == before

    def test_the_first_settings_written_win_a_creation_race(self) -> None:
        """A rival that writes its placed settings on home just before this member's: this
        member takes the rival's placement (its own record is refused)."""
        t = topic(V2)
        rival = settings(placed(G, N, 3))

        class Racing(MemoryLog):
            def append(self, partition: int, key: bytes, value: bytes, timeout_s: float):  # type: ignore[no-untyped-def]
                t.append(AT, metadata_key(rival), encode_metadata(rival))
                return super().append(partition, key, value, timeout_s)

        assert locate_member_group(Racing(t), CONFIG, 5, 5.0) == placed(G, N, 3)

    def test_a_group_created_during_the_scan_is_taken_not_called_old(self) -> None:
        """A rival creates the group placed (settings on home, then its claims) after this
        member read home and before its scan: the scan sees the rival's records, and the member
        takes the placement on home (it once took them for a group from before and exited 2)."""
        t = topic(V2)
        rival = settings(placed(G, N, 2))
        window = (AT + 1) % N
        beat = Heartbeat(1, "b-1", "b", G, "__member.b", 0, 0)

        class Racing(MemoryLog):
            created = False

            def follow(self, partitions, *, from_start=False):  # type: ignore[no-untyped-def]
                wanted = set(partitions)
                if len(wanted) == N and not self.created:
                    self.created = True
                    t.append(AT, metadata_key(rival), encode_metadata(rival))
                    t.append(window, metadata_key(rival), encode_metadata(rival))
                    t.append(window, record_key(beat), encode(beat))
                super().follow(wanted, from_start=from_start)

        assert locate_member_group(Racing(t), CONFIG, 5, 5.0) == placed(G, N, 2)

    def test_an_explicit_span_is_used_and_checked(self) -> None:
        """coordination_span 3 creates a window of three; another explicit span: exit 2."""
        t = topic(V2)
        assert locate(t, replace(CONFIG, coordination_span=3)) == placed(G, N, 3)
        with pytest.raises(ConfigError, match="coordination_span is 2 here but 3"):
            locate(t, replace(CONFIG, coordination_span=2))
        assert locate(t) == placed(G, N, 3)  # auto takes the group's


class TestFound:
    def test_spread_settings_on_home_mean_spread(self) -> None:
        """Spread settings on home: spread, without a scan."""
        t = topic(V2)
        t.append(AT, settings_key(G), encode_metadata(settings(None)))
        assert locate(t) is None

    def test_a_placement_for_another_count_is_exit_4(self) -> None:
        """Placed settings made for another partition count: refused with exit 4."""
        t = topic(V2)
        other = settings(Placement(16, 3, 1))
        t.append(AT, metadata_key(other), encode_metadata(other))
        with pytest.raises(MarshalError) as refused:
            locate(t)
        assert refused.value.exit_code == EXIT_COORDINATION_CHANGED


def test_auto_span_is_one_partition_per_ten_thousand_claims() -> None:
    """auto = clamp(ceil(claims / 10,000), 1, N)."""
    assert [auto_span(c, 8) for c in (1, 10_000, 10_001, 200_000)] == [1, 1, 2, 8]


class TestWindowCopies:
    """A placed group's settings are copied from home to its window by each member that finds
    a window partition without them (`ensure_group_settings`); the first settings there win."""

    @staticmethod
    def _member(t: MemoryTopic, client: str, hb_s: float) -> tuple[MemoryLog, FoldedLog, Any]:
        config = replace(CONFIG, client_id=client, heartbeat_interval=hb_s, coordination_span=3)
        log = MemoryLog(t)
        placement = locate_member_group(log, config, 5, 5.0)
        shared = member_settings(config, N, placement)
        reader = FoldedLog(log, shared.rationalizer)
        assert placement is not None
        reader.follow(sorted(reads(G, placement)), from_start=True)
        reader.catch_up(5.0)
        return log, reader, shared

    def test_a_member_whose_settings_differ_from_home_writes_no_copy_and_is_refused_alone(
        self,
    ) -> None:
        """The creator has written home, not yet its window copies; a member with another
        heartbeat interval starts meanwhile. It is refused before writing anything: its copy
        would have won on the window partitions and every correct member after it would have
        been refused (exit 2, not restarted) until an operator changed the settings."""
        t = topic(V2)
        a = self._member(t, "a", 1.0)  # creates the group: placed settings on home only
        b = self._member(t, "b", 2.0)  # misconfigured, finds the group placed by home's record
        window = sorted(reads(G, a[2].placement))
        assert len(window) == 3
        before = {p: len(t.read(p, 0)) for p in window}
        with pytest.raises(ConfigError, match="heartbeat"):
            ensure_group_settings(b[0], b[1].worlds, b[1].catch_up, b[2].shared, 5.0)
        assert {p: len(t.read(p, 0)) for p in window} == before, "b wrote settings"
        ensure_group_settings(a[0], a[1].worlds, a[1].catch_up, a[2].shared, 5.0)
        c = self._member(t, "c", 1.0)
        ensure_group_settings(c[0], c[1].worlds, c[1].catch_up, c[2].shared, 5.0)


class RivalLandsFirst(MemoryLog):
    """A memory log on which ``rival`` (partition, key, value) lands just before this client's
    first append: another member's write that raced it."""

    rival: tuple[int, bytes, bytes] | None = None

    def append(
        self, partition: int, key: bytes | None, value: bytes | None, timeout_s: float
    ) -> Any:
        if self.rival is not None:
            p, k, v = self.rival
            self.rival = None
            self._topic.append(p, k, v)
        return super().append(partition, key, value, timeout_s)


def test_a_rival_of_the_other_mode_is_refused_on_home_before_it_writes_the_window() -> None:
    """The creator (AMO) has the first half of its settings pair on home (no mode yet); a
    member of the other mode reads home then and finds nothing to refuse. Its own pair lands
    on home after the creator's second half, so home is AMO: it must be refused there before
    it writes its pair on the window partitions. Written on all at once, its pair would win
    the window with ALO while home stayed AMO, and every member of either mode after it would
    be refused on one or the other (a review)."""
    t = topic(V2)
    window = placed(G, N, 3)
    creator = GroupSettings(1, "a-1", "a", G, 1000, CONFIG.partitioner, CONFIG.admin_client_ids,
                            CONFIG.slicing, window, Mode.AMO)  # fmt: skip
    (k0, v0), (k1, v1) = settings_records(creator)
    t.append(AT, k0, v0)
    config = replace(CONFIG, client_id="b", heartbeat_interval=1.0, coordination_span=3)
    log = RivalLandsFirst(t)
    placement = locate_member_group(log, config, 5, 5.0)
    assert placement == window
    shared = member_settings(config, N, placement)
    assert shared.shared is not None and shared.shared.mode is Mode.ALO
    reader = FoldedLog(log, shared.rationalizer)
    reader.follow(sorted(reads(G, placement)), from_start=True)
    reader.catch_up(5.0)
    log.rival = (AT, k1, v1)  # the creator's second half lands before b's first append
    others = [p for p in sorted(reads(G, placement)) if p != AT]
    before = {p: len(t.read(p, 0)) for p in others}
    with pytest.raises(ConfigError, match="mode is alo here but amo"):
        ensure_group_settings(log, reader.worlds, reader.catch_up, shared.shared, 5.0)
    assert {p: len(t.read(p, 0)) for p in others} == before, "b wrote the window"
