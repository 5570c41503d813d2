"""How a finished run's processes end: the process group closed, then Python's exit without its
teardown, with the run's exit code, its exit handlers run and its output flushed."""

from __future__ import annotations

import atexit
import multiprocessing
import os
import threading
import time
from pathlib import Path

import torch

from llm_rl.generation.vllm_engine.engine import free_port
from llm_rl.training.process_end import end_processes, leave_run


def join_group(rank: int, port: int) -> None:
    """One of two gloo processes, after one collective."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    gathered = [torch.zeros(1), torch.zeros(1)]
    torch.distributed.all_gather(gathered, torch.tensor([float(rank)]))


def close_after_a_collective(rank: int, port: int, closed: torch.multiprocessing.SimpleQueue) -> None:
    """Gather once, end the run's processes, say whether the group is gone."""
    join_group(rank, port)
    end_processes()
    closed.put((rank, not torch.distributed.is_initialized()))


def test_a_finished_multi_process_run_closes_its_process_group() -> None:
    """Left open to interpreter exit, gloo's threads can abort a run that succeeded (exit -6)."""
    context = torch.multiprocessing.get_context("spawn")
    closed = context.SimpleQueue()
    torch.multiprocessing.start_processes(
        close_after_a_collective, args=(free_port(), closed), nprocs=2, start_method="spawn"
    )
    assert sorted(closed.get() for _ in range(2)) == [(0, True), (1, True)]


def leave_with_work_pending(rank: int, port: int, folder: str) -> None:
    """Gather once, leave a thread still writing and an exit handler to run, then leave the run with 75."""
    join_group(rank, port)

    def write_late() -> None:
        time.sleep(0.5)
        Path(folder, f"thread-{rank}").write_text("done")

    threading.Thread(target=write_late).start()
    atexit.register(lambda: Path(folder, f"handler-{rank}").write_text("ran"))
    leave_run(75)
    Path(folder, f"returned-{rank}").write_text("leave_run returned")


def test_a_process_of_a_finished_run_leaves_with_its_code_after_pythons_exit_steps(tmp_path: Path) -> None:
    """The run's exit code, every non-daemon thread finished and every exit handler run, as at a normal
    exit; nothing after `leave_run` runs, and no teardown of Python's objects follows."""
    context = multiprocessing.get_context("spawn")
    port = free_port()
    processes = [
        context.Process(target=leave_with_work_pending, args=(rank, port, str(tmp_path))) for rank in (0, 1)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [process.exitcode for process in processes] == [75, 75]
    files = sorted(path.name for path in tmp_path.iterdir())
    assert files == ["handler-0", "handler-1", "thread-0", "thread-1"]


def test_a_single_process_run_returns_its_code(monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert leave_run(75) == 75
