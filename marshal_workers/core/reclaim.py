"""A claim lost to its own lease running out: where it starts again (pure).

A coordination stall longer than the lease (a broker failure the heartbeat interval was not chosen
for, see docs/operating.md) ends every lease: children are fenced, and the releases after expiry are
not acknowledged, so the log keeps the position of the last heartbeat it accepted, older than what
the children had done. If this member then wins the claim back while nobody else held it in between
(the grant's previous holder is this client: no other grant, and no release, since), the records up
to the position its own child reported were handled by this member alone, under its own claim: it
resumes there (the larger of that and the log's), and its first heartbeat tells the log. Otherwise
the log's position stands: another owner may have moved it (a rewind included).

Nothing writes that position to the log. A release written after the lease ended (the first
one, or one written again while the fold still showed this instance as the holder, as members
did until marshal-sim seeds 29 and 63 of freeze,eager-compaction) may land after a rival's
takeover: refused, but under the key of the claim's position records, and once the cleaner has
removed the rival's it is the key's newest record, an older position a compacted reader takes
for the claim's (`Keeping.withhold_release`). So the next owner other than this member resumes
at the log's position: ALO hands again what the child did after the last heartbeat the log
accepted, as after a crash.
"""

from __future__ import annotations


def reclaimed_position(
    log_position: int, own_position: int | None, previous_client: str | None, client_id: str
) -> int:
    """The start position of a claim won back (see the module docstring)."""
    if own_position is None or previous_client != client_id:
        return log_position
    return max(log_position, own_position)
