"""The lost-rank line in one process, against a real TCP store: said for a broken collective, not for a
process that failed on its own while its peers wait, alive (tests/integration/test_cluster_faults.py
kills a real rank)."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from datetime import timedelta

import pytest
import torch

from llm_rl.training.lost_ranks import ProcessRoll, is_broken_collective

GLOO_RESET = RuntimeError("[gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:41230")
DISK_FULL = OSError(errno.ENOSPC, "No space left on device", "/runs/a/.staging/checkpoint-4/optimizer.pt")


@pytest.fixture
def roll() -> ProcessRoll:
    """Rank 0 of 2 in a store of its own; rank 1 never writes to it."""
    store = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=5))
    return ProcessRoll(store, rank=0, world_size=2)


def test_a_broken_collective_names_the_silent_rank(roll: ProcessRoll, capsys) -> None:
    roll.report_lost(GLOO_RESET)
    assert capsys.readouterr().err == (
        "lost 1 of 2 processes: rank 1 (never started, not answering). The run stops; the same command "
        "resumes from its last checkpoint\n"
    )


def test_a_process_failing_alone_names_no_one(roll: ProcessRoll, capsys) -> None:
    roll.report_lost(DISK_FULL)
    assert capsys.readouterr().err == ""


def test_what_counts_as_a_broken_collective() -> None:
    assert is_broken_collective(GLOO_RESET)
    assert is_broken_collective(ConnectionResetError(104, "Connection reset by peer"))
    assert is_broken_collective(torch.distributed.DistBackendError("NCCL communicator was aborted"))
    assert not is_broken_collective(DISK_FULL)
    assert not is_broken_collective(ValueError("reward function 'accuracy' returned 3 values for 4"))


def test_a_peer_that_ends_while_the_survivor_waits_is_named_gone(roll: ProcessRoll, capsys) -> None:
    """A killed process closes its sockets (how the survivor learns) a moment before it has ended: the
    survivor keeps looking while it waits, so the peer is named gone, not silent."""
    ending = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    try:
        roll.store.set("proc/1", json.dumps({"host": roll.host, "pid": ending.pid}))
        roll.report_lost(GLOO_RESET)
    finally:
        ending.wait()
    assert capsys.readouterr().err == (
        f"lost 1 of 2 processes: rank 1 (pid {ending.pid} on {roll.host}, gone). The run stops; the same "
        "command resumes from its last checkpoint\n"
    )
