"""Naming the process that was lost when a run of several processes breaks.

When one rank dies (`kill -9`, the out-of-memory killer, a node that goes down), the others see only a
broken collective ("Connection reset by peer") and the launcher stops them. Which rank was lost, and
where, is what the person reading the log needs. Each process therefore writes its host and pid into
the rendezvous store at the start (torchrun's agent keeps that store alive whatever happens to its
workers). When training fails in a process, it marks itself as a survivor, marks as lost every peer on
its own host whose process is gone, and waits a few seconds for the others to do the same; the lowest
surviving rank then prints one line naming each rank that is gone or never answered, when one is known
to be gone or the failure is a broken collective (a process that fails alone leaves its peers waiting,
alive: they are not lost).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from datetime import timedelta

import torch

from llm_rl.errors import causes

# How long a failing process waits for the other survivors to speak up before it names the silent ones.
ANSWER_SECONDS = 3.0
STORE_TIMEOUT = timedelta(seconds=5)


def process_is_gone(pid: int) -> bool:
    """Whether a process on this host has ended (a zombie not yet reaped by its launcher counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return False


# How gloo, NCCL and the TCP store report a peer that went away.
BROKEN_COLLECTIVE_WORDS = ("connection reset", "connection closed", "broken pipe", "nccl", "gloo")


def is_broken_collective(err: BaseException) -> bool:
    """Whether `err` is a collective or the store failing because a peer went away."""
    for cause in causes(err):
        if isinstance(cause, torch.distributed.DistError | ConnectionError):
            return True
        if any(words in str(cause).lower() for words in BROKEN_COLLECTIVE_WORDS):
            return True
    return False


class ProcessRoll:
    """Who is who in a run of several processes, kept in the launcher's rendezvous store."""

    def __init__(self, store: torch.distributed.Store, rank: int, world_size: int) -> None:
        self.store, self.rank, self.world_size = store, rank, world_size
        self.host = socket.gethostname()
        self.store.set(f"proc/{rank}", json.dumps({"host": self.host, "pid": os.getpid()}))

    @classmethod
    def join(cls) -> ProcessRoll | None:
        """This process's entry in the roll, or None for a single process or without a reachable store."""
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        address, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if world_size <= 1 or not address or not port:
            return None
        # A restarted set of workers (torchrun --max_restarts) gets a roll of its own.
        prefix = f"llm_rl/roll/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        try:
            client = torch.distributed.TCPStore(
                address, int(port), is_master=False, timeout=STORE_TIMEOUT, wait_for_workers=False
            )
            return cls(torch.distributed.PrefixStore(prefix, client), int(os.environ["RANK"]), world_size)
        except (RuntimeError, ValueError, KeyError):
            return None

    def peer(self, rank: int) -> dict | None:
        key = f"proc/{rank}"
        return json.loads(self.store.get(key)) if self.store.check([key]) else None

    def mark_if_gone(self, rank: int) -> None:
        """Mark a peer on this host as lost once its process has ended."""
        peer = self.peer(rank)
        if rank != self.rank and peer and peer["host"] == self.host and process_is_gone(peer["pid"]):
            self.store.set(f"lost/{rank}", "1")

    def lost_ranks(self) -> dict[int, str]:
        """After a failure: each rank that is gone or silent, with what is known of it."""
        self.store.set(f"survivor/{self.rank}", "1")
        deadline = time.monotonic() + ANSWER_SECONDS
        while True:
            unanswered = [
                rank
                for rank in range(self.world_size)
                if not self.store.check([f"survivor/{rank}"]) and not self.store.check([f"lost/{rank}"])
            ]
            # Looked at again each round: a killed process closes its sockets, which is how this one
            # failed, a moment before it has ended.
            for rank in unanswered:
                self.mark_if_gone(rank)
            if not unanswered or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        unanswered = [rank for rank in unanswered if not self.store.check([f"lost/{rank}"])]
        lost = {}
        for rank in range(self.world_size):
            peer = self.peer(rank)
            where = f"pid {peer['pid']} on {peer['host']}" if peer else "never started"
            if self.store.check([f"lost/{rank}"]):
                lost[rank] = f"{where}, gone"
            elif rank in unanswered:
                lost[rank] = f"{where}, not answering"
        return lost

    def report_lost(self, err: BaseException) -> None:
        """Print one line naming the lost ranks, from the lowest surviving rank; never raises.

        Only when a rank is known to be gone, or `err` is a broken collective: a process that fails on
        its own (a full disk, a reward function's error) leaves the others waiting in a collective,
        alive, and names no one.
        """
        try:
            lost = self.lost_ranks()
            if not is_broken_collective(err) and not any(what.endswith("gone") for what in lost.values()):
                return
            survivors = [rank for rank in range(self.world_size) if rank not in lost]
        except Exception:  # the store itself is gone with the node that held it
            print(
                f"lost contact with the run's rendezvous store at {os.environ.get('MASTER_ADDR')}: "
                "the node of rank 0 is likely down",
                file=sys.stderr,
                flush=True,
            )
            return
        if lost and survivors and survivors[0] == self.rank:
            named = "; ".join(f"rank {rank} ({what})" for rank, what in sorted(lost.items()))
            print(
                f"lost {len(lost)} of {self.world_size} processes: {named}. The run stops; "
                "the same command resumes from its last checkpoint",
                file=sys.stderr,
                flush=True,
            )
