"""The lines `marshal-admin produce` reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from marshal_workers.admin.produce import parse_records
from marshal_workers.common.errors import ConfigError


def test_key_tab_value_lines() -> None:
    lines = ["k1\tv1\n", "\n", "plain value\r\n", "k2\tv\twith tab\n", "\tno key text\n"]
    assert parse_records(lines) == [
        (b"k1", b"v1"),
        (None, b"plain value"),
        (b"k2", b"v\twith tab"),
        (b"", b"no key text"),
    ]


def test_json_lines_keyed_by_a_field() -> None:
    lines = ['{"id": "a", "n": 1}\n', '{"id": 2}\n', '{"id": {"x": 1}}\n']
    assert parse_records(lines, "id") == [
        (b"a", b'{"id": "a", "n": 1}'),
        (b"2", b'{"id": 2}'),
        (b'{"x": 1}', b'{"id": {"x": 1}}'),
    ]


@pytest.mark.parametrize(
    ("line", "why"), [("not json", "not a JSON object"), ('{"other": 1}', "no field 'id'")]
)
def test_a_bad_line_is_a_usage_error_naming_it(line: str, why: str) -> None:
    with pytest.raises(ConfigError, match=f"line 2: {why}") as caught:
        parse_records(['{"id": 1}', line], "id")
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("key_field", [None, "id"])
def test_a_line_that_is_not_utf8_names_its_line(key_field: str | None) -> None:
    """A non-UTF-8 byte: one error naming the line (and the byte), exit 2."""
    good = b'{"id": 1}\n' if key_field else b"k\tv\n"
    with pytest.raises(ConfigError, match=r"line 3: not UTF-8 \(byte 0xff at column 4\)"):
        parse_records([good, good, b"abc\xff\n", good], key_field)


def test_produce_with_a_non_utf8_line_writes_nothing_and_exits_2(tmp_path: Path) -> None:
    """`marshal-admin produce --file F`: one line on stderr naming the line, exit 2, and
    nothing is written (no broker is reached: the one given does not exist)."""
    source = tmp_path / "records.txt"
    source.write_bytes(b"k\tv\nk\t\xe9t\xe9\n")
    admin = Path(sys.executable).with_name("marshal-admin")
    out = subprocess.run(
        [str(admin), "produce", "orders", "--file", str(source), "--bootstrap-servers",
         "127.0.0.1:1"], capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "line 2: not UTF-8" in lines[0], out.stderr
