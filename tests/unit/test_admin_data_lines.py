"""The lines `marshal-admin produce` reads (issue 21 item 7)."""

from __future__ import annotations

import pytest

from marshal_workers.admin.data import parse_records
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
