"""Bad settings are usage errors at configuration time: exit 2, one line, before any I/O.

Covers a [kafka] property librdkafka refuses, non-finite or out-of-range numbers and a malformed
bootstrap address list, for `marshal-run` and `marshal-admin`.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from marshal_workers.common.errors import ConfigError
from marshal_workers.config.runconfig import run_config
from marshal_workers.config.settings import heartbeat_ms, resolve
from marshal_workers.supervisor.runtime import member_settings

BIN = Path(sys.executable).parent
RUN = [str(BIN / "marshal-run"), "--handler", "marshal_workers.plugins.echo:handle"]
RUN += ["--mode", "alo"]
RUN += ["--topic", "t", "--group", "g", "--client-id", "c"]
UNREACHABLE = "127.0.0.1:1"


def _run(args: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=False, capture_output=True, text=True, timeout=timeout)


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert done.stdout == "", done.stdout
    return lines[0]


# ---- 13.1: the [kafka] table ------------------------------------------------------------------


def test_unknown_kafka_property_is_refused_naming_it_and_the_file(tmp_path: Path) -> None:
    """A [kafka] property librdkafka does not know is a ConfigError naming it and the file."""
    toml = tmp_path / "fleet.toml"
    toml.write_text('[kafka]\n"bogus.prop" = 1\n')
    with pytest.raises(ConfigError) as caught:
        resolve({}, toml, environ={})
    assert "bogus.prop" in str(caught.value) and str(toml) in str(caught.value)
    assert caught.value.exit_code == 2


def test_bad_kafka_value_is_refused(tmp_path: Path) -> None:
    """A known property with a value librdkafka refuses is refused the same way."""
    toml = tmp_path / "fleet.toml"
    toml.write_text('[kafka]\n"linger.ms" = "soon"\n"acks" = "all"\n')
    with pytest.raises(ConfigError, match=r"linger\.ms.*fleet\.toml"):
        resolve({}, toml, environ={})


def test_good_kafka_table_passes(tmp_path: Path) -> None:
    """Ordinary librdkafka properties pass the check."""
    toml = tmp_path / "fleet.toml"
    toml.write_text('[kafka]\n"linger.ms" = 5\n"security.protocol" = "plaintext"\n')
    assert dict(resolve({}, toml, environ={}).kafka) == {
        "linger.ms": "5",
        "security.protocol": "plaintext",
    }


def test_marshal_run_with_bogus_kafka_property_exits_2_with_one_line(tmp_path: Path) -> None:
    """`marshal-run --config` with a bogus [kafka] property: exit 2, one line, no KafkaError."""
    toml = tmp_path / "fleet.toml"
    toml.write_text(f'bootstrap_servers = "{UNREACHABLE}"\n[kafka]\n"bogus.prop" = 1\n')
    done = _run([*RUN, "--config", str(toml)])
    line = _one_error_line(done)
    assert done.returncode == 2
    assert "bogus.prop" in line and str(toml) in line and "KafkaError{" not in line


# ---- 13.2: numbers are finite and in range -----------------------------------------------------


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e308", "0", "-1", "0.0001"])
def test_heartbeat_interval_must_be_finite_and_in_range(value: str) -> None:
    """inf, nan, huge, zero, negative and sub-millisecond intervals are refused."""
    with pytest.raises(ConfigError, match="heartbeat_interval"):
        resolve({"heartbeat_interval": value}, None, environ={})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("stop_timeout", "inf"),
        ("retry_backoff", "nan"),
        ("batch_size", "10" * 20),
        ("child_nice", "20"),
        ("child_nice", "-1"),
    ],
)
def test_every_numeric_setting_is_bounded(name: str, value: str) -> None:
    """Other numeric settings refuse non-finite and absurd values too."""
    with pytest.raises(ConfigError, match=name):
        resolve({name: value}, None, environ={})


@pytest.mark.parametrize(("given", "nice"), [({}, 10), ({"child_nice": "0"}, 0)])
def test_children_run_below_the_supervisor_by_default(given: dict[str, str], nice: int) -> None:
    """`child_nice` reaches every child's spec: 10 lower unless set (0: the same)."""
    required = {"handler": "m:f", "mode": "alo", "topic": ["t"], "group": "g"}
    config = run_config(resolve({**required, **given}, None, environ={}))
    assert member_settings(config, 1).child.nice == nice


def test_numeric_bounds_apply_to_toml_values(tmp_path: Path) -> None:
    """A TOML float inf is refused like the flag (TOML has inf literals)."""
    toml = tmp_path / "fleet.toml"
    toml.write_text("heartbeat_interval = inf\n")
    with pytest.raises(ConfigError, match="heartbeat_interval"):
        resolve({}, toml, environ={})


def test_marshal_run_heartbeat_inf_exits_2_with_one_line() -> None:
    """`marshal-run --heartbeat-interval inf`: exit 2 and one line, not an OverflowError."""
    done = _run([*RUN, "--bootstrap-servers", UNREACHABLE, "--heartbeat-interval", "inf"])
    line = _one_error_line(done)
    assert done.returncode == 2 and "heartbeat_interval" in line


def test_marshal_admin_status_heartbeat_inf_exits_2_with_one_line() -> None:
    """`marshal-admin status --heartbeat-interval inf` with no broker: exit 2, one line."""
    admin = str(BIN / "marshal-admin")
    hb_inf = ["--heartbeat-interval", "inf"]
    done = _run([admin, "status", "--group", "g", "--bootstrap-servers", UNREACHABLE, *hb_inf])
    _one_error_line(done)
    assert done.returncode == 2


def test_one_conversion_of_hb_to_ms() -> None:
    """HB seconds -> ms rounds (1.001 s is 1001 ms; truncation would say 1000)."""
    assert heartbeat_ms(1.001) == 1001
    assert heartbeat_ms(0.3) == 300
    assert heartbeat_ms(10) == 10_000


# ---- 13.3: the bootstrap address list ---------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["foo bar", "", "host:port", "a:1,,b:2", "h:99999", "h:1 ,x y:2", "[::1:9092", "localhost"],
)
def test_malformed_bootstrap_servers_are_usage_errors(value: str) -> None:
    """A list that is not HOST:PORT[,HOST:PORT...] is refused at configuration time."""
    with pytest.raises(ConfigError, match="bootstrap_servers"):
        resolve({"bootstrap_servers": value or " "}, None, environ={})


@pytest.mark.parametrize(
    "value",
    ["127.0.0.1:9092", "k1:9092,k2:9092", "SSL://k.example.com:9093", "[::1]:9092"],
)
def test_wellformed_bootstrap_servers_pass(value: str) -> None:
    """Host names, IPv4, [IPv6] and protocol prefixes are accepted, each with its port."""
    assert (
        resolve({"bootstrap_servers": value}, None, environ={}).values["bootstrap_servers"] == value
    )


def test_a_host_without_a_port_is_refused_as_the_message_says() -> None:
    """`--bootstrap-servers localhost`: the message asks for HOST:PORT, so a
    host alone is refused (exit 2, one line), not tried on a port nobody named."""
    started = time.monotonic()
    done = _run([*RUN, "--bootstrap-servers", "localhost"])
    line = _one_error_line(done)
    assert done.returncode == 2 and "'localhost' is not HOST:PORT" in line, line
    assert time.monotonic() - started < 8, "it waited for a broker"


def test_marshal_run_malformed_bootstrap_exits_2_at_once() -> None:
    """`marshal-run --bootstrap-servers 'foo bar'` exits 2 without trying to connect."""
    started = time.monotonic()
    done = _run([*RUN, "--bootstrap-servers", "foo bar"])
    line = _one_error_line(done)
    assert done.returncode == 2 and "foo bar" in line
    assert time.monotonic() - started < 8, "it waited for a broker"


@pytest.mark.parametrize("given", ["0", "-3", "abc", "1025"])
def test_workers_per_partition_names_its_own_bounds_whatever_is_wrong(given: str) -> None:
    """Out of range or not a number, one message with the setting's own limit (a review:
    0 said "from 1 to 10000000" where 1025 said "1 to 1024", and "abc" Python's int() text)."""
    with pytest.raises(ConfigError) as caught:
        resolve({"workers_per_partition": given}, None, environ={})
    assert str(caught.value).endswith("must be a whole number from 1 to 1024"), caught.value


@pytest.mark.parametrize(
    ("setting", "given", "said"),
    [
        ("coordination_span", "abc", "must be auto or a whole number from 1 to 10000000"),
        ("coordination_span", "0", "must be auto or a whole number from 1 to 10000000"),
        ("heartbeat_interval", "abc", "must be a number of seconds from 0.001 to 86400"),
        ("heartbeat_interval", "nan", "must be a number of seconds from 0.001 to 86400"),
    ],
)
def test_a_setting_that_is_not_a_number_says_what_it_takes(
    setting: str, given: str, said: str
) -> None:
    """Not int()'s or float()'s own words, and a span's message names auto (a review)."""
    with pytest.raises(ConfigError) as caught:
        resolve({setting: given}, None, environ={})
    assert said in str(caught.value), caught.value
