"""Checking a coordination topic's config against docs/design.md (pure part)."""

from __future__ import annotations

from marshal_workers.log.topicadmin import (
    HISTORY_WINDOW_MS,
    ConfigDifference,
    coordination_topic_config,
    diff_topic_config,
)
from marshal_workers.protocol.leases import min_compaction_lag_ms


def settings(diffs: list[ConfigDifference]) -> dict[str, bool]:
    return {d.setting: d.fatal for d in diffs}


class TestWhatInitCreates:
    def test_created_config_has_no_differences(self) -> None:
        """The config init creates a topic with passes the check, for any replication factor."""
        for rf in (1, 2, 3, 5):
            assert diff_topic_config(coordination_topic_config(rf), rf) == []

    def test_min_insync_replicas_is_min_of_two_and_rf(self) -> None:
        """min.insync.replicas is 1 with one replica and 2 from two replicas on."""
        assert coordination_topic_config(1)["min.insync.replicas"] == "1"
        assert coordination_topic_config(3)["min.insync.replicas"] == "2"

    def test_timestamps_are_log_append_time(self) -> None:
        """The topic stamps records with the broker's clock and is compacted."""
        config = coordination_topic_config(3)
        assert config["message.timestamp.type"] == "LogAppendTime"
        assert config["cleanup.policy"] == "compact"
        assert int(config["min.compaction.lag.ms"]) >= HISTORY_WINDOW_MS


class TestDifferences:
    def test_create_time_is_fatal(self) -> None:
        """A topic stamped with the sender's clock is refused."""
        config = {**coordination_topic_config(1), "message.timestamp.type": "CreateTime"}
        diffs = diff_topic_config(config, 1)
        assert settings(diffs) == {"message.timestamp.type": True}
        assert str(diffs[0]).startswith("fatal: message.timestamp.type is CreateTime, must be")

    def test_kafka_defaults_warn_but_are_not_fatal(self) -> None:
        """A topic with Kafka's defaults gets a warning per setting, none fatal but the clock."""
        defaults = {
            "message.timestamp.type": "LogAppendTime",
            "unclean.leader.election.enable": "true",
            "min.insync.replicas": "1",
            "cleanup.policy": "delete",
            "min.compaction.lag.ms": "0",
            "segment.ms": "604800000",
        }
        assert settings(diff_topic_config(defaults, 3)) == {
            "unclean.leader.election.enable": False,
            "min.insync.replicas": False,
            "cleanup.policy": False,
            "min.compaction.lag.ms": False,
            "segment.ms": False,
        }

    def test_insync_above_replication_factor_is_fatal(self) -> None:
        """min.insync.replicas above the replication factor makes every write fail: fatal."""
        config = {**coordination_topic_config(1), "min.insync.replicas": "2"}
        assert settings(diff_topic_config(config, 1)) == {"min.insync.replicas": True}

    def test_missing_settings_are_reported_as_unset(self) -> None:
        """A setting the broker did not report counts as a difference, shown as unset."""
        diffs = diff_topic_config({}, 1)
        assert "message.timestamp.type" in settings(diffs)
        assert all(" is unset, " in str(d) for d in diffs)

    def test_each_difference_is_one_line(self) -> None:
        """Every difference renders as one line naming the setting, its value and the target."""
        diffs = diff_topic_config({"segment.ms": "x"}, 3)
        for d in diffs:
            text = str(d)
            assert "\n" not in text
            assert text.startswith(("fatal: ", "warning: "))
            assert d.setting in text and d.expected in text


class TestCompactionLag:
    """A compaction lag below the safe window lets the cleaner remove records that
    still keep a claim's lease alive; a member refuses such a topic instead of warning."""

    def test_below_the_safe_window_is_fatal_for_a_member(self) -> None:
        config = {**coordination_topic_config(1), "min.compaction.lag.ms": "0"}
        diffs = diff_topic_config(config, 1, heartbeat_interval_s=1.0)
        assert settings(diffs) == {"min.compaction.lag.ms": True}
        assert "4000" in str(diffs[0])

    def test_the_safe_window_is_four_heartbeat_intervals(self) -> None:
        assert min_compaction_lag_ms(1.0) == 4000
        assert min_compaction_lag_ms(2.5) == 10_000

    def test_at_the_safe_window_but_below_the_history_window_only_warns(self) -> None:
        config = {**coordination_topic_config(1), "min.compaction.lag.ms": "4000"}
        diffs = diff_topic_config(config, 1, heartbeat_interval_s=1.0)
        assert settings(diffs) == {"min.compaction.lag.ms": False}

    def test_a_lag_unset_is_fatal_for_a_member(self) -> None:
        config = dict(coordination_topic_config(1))
        del config["min.compaction.lag.ms"]
        assert settings(diff_topic_config(config, 1, heartbeat_interval_s=1.0)) == {
            "min.compaction.lag.ms": True
        }
