"""The shapes a handler may take, as the child calls them (no broker)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from marshal_workers.child.plugin import Plugin
from marshal_workers.handler import Context, Record
from marshal_workers.handler.loading import LoadError, load_handler

CTX = object()  # the plugin passes ctx through untouched
REC = object()


def plain(record: Record, ctx: Context) -> str:
    """A plain handler function."""
    return "plain"


class Full:
    """A class with every hook; it notes each call."""

    def __init__(self) -> None:
        self.calls: list[object] = []

    def setup(self, ctx: Context) -> None:
        self.calls.append("setup")

    def handle(self, record: Record, ctx: Context) -> None:
        self.calls.append("handle")

    def handle_batch(self, records: Sequence[Record], ctx: Context) -> None:
        self.calls.append("batch")

    def teardown(self, ctx: Context, reason: str) -> None:
        self.calls.append(("teardown", reason))


class TestShapes:
    def test_function_is_called_per_record_and_has_no_hooks(self) -> None:
        """A function is the per-record handler; setup and teardown do nothing."""
        plugin = Plugin(plain)
        assert plugin.handle_batch is None
        assert plugin.handle(REC, CTX) == "plain"  # type: ignore[arg-type]
        plugin.setup(CTX)  # type: ignore[arg-type]
        plugin.teardown(CTX, "stop")  # type: ignore[arg-type]

    def test_class_is_instantiated_and_batch_preferred(self) -> None:
        """A class is instantiated once; handle_batch wins over handle; hooks are called."""
        plugin = Plugin(Full)
        assert isinstance(plugin.target, Full)
        plugin.setup(CTX)  # type: ignore[arg-type]
        assert plugin.handle_batch is not None
        plugin.handle_batch([REC], CTX)  # type: ignore[list-item, arg-type]
        plugin.teardown(CTX, "stop")  # type: ignore[arg-type]
        assert plugin.target.calls == ["setup", "batch", ("teardown", "stop")]

    def test_instance_with_handle_only_is_per_record(self) -> None:
        """An instance with just handle() is called per record."""

        class Single:
            def handle(self, record: Record, ctx: Context) -> str:
                return "single"

        plugin = Plugin(Single())
        assert plugin.handle_batch is None
        assert plugin.handle(REC, CTX) == "single"  # type: ignore[arg-type]

    def test_object_without_a_handler_is_refused(self) -> None:
        """An object that is neither callable nor has handle/handle_batch is a TypeError."""

        class Nothing:
            pass

        with pytest.raises(TypeError, match="neither handle nor handle_batch"):
            Plugin(Nothing)


class TestBatchView:
    def test_records_by_default(self) -> None:
        assert Plugin(Full).messages is False

    def test_a_batch_plugin_may_ask_for_the_consumers_messages(self) -> None:
        class Raw(Full):
            batch_view = "messages"

        assert Plugin(Raw).messages is True

    def test_messages_without_handle_batch_are_refused(self) -> None:
        class PerRecord:
            batch_view = "messages"

            def handle(self, record: Record, ctx: Context) -> None:
                pass

        with pytest.raises(TypeError, match="needs handle_batch"):
            Plugin(PerRecord)

    def test_an_unknown_view_is_refused(self) -> None:
        class Typo(Full):
            batch_view = "message"

        with pytest.raises(TypeError, match="batch_view must be 'records' or 'messages'"):
            Plugin(Typo)


def test_a_mistyped_handler_name_lists_the_bundled_ones() -> None:
    """`--handler sqlit`: the one-line error names the entry points there are."""
    with pytest.raises(LoadError) as caught:
        load_handler("sqlit")
    message = str(caught.value)
    assert "\n" not in message
    for name in ("echo", "jsonl", "ledger", "sqlite"):
        assert repr(name) in message, message
