"""Which node leads the KRaft quorum, read from the nodes' server logs (the broker-failure test
kills that node: the longest stall a combined node's death causes)."""

from __future__ import annotations

from pathlib import Path

from marshal_workers.localkafka.process import quorum_leader


def transition(node_id: int, epoch: int) -> str:
    return (
        f"[2026-11-27 05:25:20,970] INFO [RaftManager id={node_id}] Completed transition to "
        f"Leader(localVoterNode=VoterNode(voterKey=ReplicaKey(id={node_id}, directoryId=SOfA), "
        f"listeners=Endpoints(endpoints={{}})), epoch={epoch}, epochStartOffset=116, "
        "voterStates={1=ReplicaState(replicaKey=ReplicaKey(id=1, directoryId=<undefined>))})\n"
    )


def test_the_newest_epoch_names_the_leader(tmp_path: Path) -> None:
    dirs = [tmp_path / f"node-{n}" for n in (1, 2, 3)]
    for d in dirs:
        d.mkdir()
    (dirs[0] / "server.log").write_text(transition(1, 1) + "other line\n" + transition(1, 4))
    (dirs[1] / "server.log").write_text(transition(2, 3))
    assert quorum_leader(dirs) == 1
    (dirs[1] / "server.log").write_text(transition(2, 3) + transition(2, 5))
    assert quorum_leader(dirs) == 2


def test_no_log_says_none(tmp_path: Path) -> None:
    (tmp_path / "server.log").write_text("INFO nothing about leaders\n")
    assert quorum_leader([tmp_path, tmp_path / "missing"]) is None
