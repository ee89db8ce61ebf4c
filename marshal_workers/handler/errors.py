"""What a handler may raise, and the error a handler call that ended the child is reported as."""

from __future__ import annotations


class StopProcessing(Exception):  # noqa: N818 (a request, not only an error)
    """Raise from a handler to stop the child at once: no retries, no dead letter, no skip.

    For failures that no retry and no other record can cure, such as a sink refusing a write
    because a newer owner of the partition exists (see ``plugins/sqlite_sink.py``).
    """


class HandlerEnded(Exception):  # noqa: N818 (what happened, not a programming error)
    """The handler call ended the child (it timed out and was killed, called ``os._exit``, or
    a signal ended it): the error a dead letter or a skip of its record carries."""
