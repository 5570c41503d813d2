"""Faults of runs in several processes, as a cluster has them: a rank lost mid-update (`kill -9`) and a
preemption signal, each followed by the same command resuming to the end of the budget.

Every run here is `accelerate launch` of the embedded recipe in two CPU processes (gloo), 10-20 s each.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from llm_rl.training.checkpoints import list_checkpoints, read_state
from tests.conftest import ACCELERATE_LAUNCH, REPO, entry, rows

DDP = str(REPO / "accelerate_configs" / "cpu_ddp_2proc.yaml")
BUDGET = 12
EVERY_TWO_STEPS = ["checkpointing.every=2", "checkpointing.unit=steps"]


def two_process_command(algorithm: str, run: Path, *overrides: str) -> list[str]:
    per_process = ["training.per_device_batch_size=8"]
    return [*ACCELERATE_LAUNCH, "--config_file", DDP, *entry(algorithm, run, *per_process, *overrides)]


def start(command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )


def wait_for_rows(run: Path, process: subprocess.Popen, count: int) -> None:
    """Until the run has logged `count` updates (the next one is then in progress)."""
    deadline = time.monotonic() + 300
    metrics = run / "metrics.jsonl"
    while time.monotonic() < deadline and process.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"the run ended or stalled before {count} rows: {process.poll()}")


def worker(launcher: subprocess.Popen, rank: int) -> psutil.Process:
    """The training process of a global rank under the launcher."""
    for child in psutil.Process(launcher.pid).children(recursive=True):
        try:
            if child.environ().get("RANK") == str(rank) and any(
                "recipes/" in part for part in child.cmdline()
            ):
                return child
        except psutil.NoSuchProcess:
            continue
    raise AssertionError(f"no worker of rank {rank}")


def resume_to_the_end(command: list[str], run: Path) -> None:
    """The same command again finishes the budget, every update logged once, in order."""
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run / "run_summary.json").read_text())
    assert (summary["status"], summary["steps"]) == ("completed", BUDGET)
    assert [row["step"] for row in rows(run)] == list(range(1, BUDGET + 1)), "no gap, no duplicate"
    assert [row["samples"] for row in rows(run)] == [16 * step for step in range(1, BUDGET + 1)]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_a_lost_rank_stops_the_run_named_and_the_same_command_resumes(tmp_path: Path, algorithm: str) -> None:
    run = tmp_path / "run"
    command = two_process_command(algorithm, run, f"training.max_steps={BUDGET}", *EVERY_TWO_STEPS)
    launcher = start(command)
    wait_for_rows(run, launcher, 3)
    lost = worker(launcher, 1)
    lost.kill()
    killed_at = time.monotonic()
    output, _ = launcher.communicate(timeout=60)
    assert time.monotonic() - killed_at < 60
    assert launcher.returncode != 0
    named = [line for line in output.splitlines() if line.startswith("lost 1 of 2 processes:")]
    assert named == [
        f"lost 1 of 2 processes: rank 1 (pid {lost.pid} on {os.uname().nodename}, gone). The run stops; "
        "the same command resumes from its last checkpoint"
    ], output[-3000:]
    summary = json.loads((run / "run_summary.json").read_text())
    assert summary["status"] == "failed" and summary["steps"] < BUDGET
    assert read_state(list_checkpoints(run)[-1])["step"] % 2 == 0

    resume_to_the_end(command, run)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("algorithm", "stop"),
    [("ppo", signal.SIGTERM), ("grpo", signal.SIGUSR1)],
)
def test_two_preempted_processes_checkpoint_together_and_resume(
    tmp_path: Path, algorithm: str, stop: signal.Signals
) -> None:
    """The scheduler signals every process (Slurm does, to each of a step's processes): the launcher
    passes the signal on as well, so each worker may get it twice. torchrun's agent passes on SIGUSR1 only
    when told to (docs/scaling.md)."""
    run = tmp_path / "run"
    command = two_process_command(algorithm, run, f"training.max_steps={BUDGET}")
    launcher = start(command, env={"PET_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"})
    wait_for_rows(run, launcher, 3)
    for process in (worker(launcher, 0), worker(launcher, 1), psutil.Process(launcher.pid)):
        process.send_signal(stop)
    output, _ = launcher.communicate(timeout=60)
    # torchrun's agent ends with 128 + the signal's number once its workers are done; each worker's own
    # exit is 75, and run_summary.json says preempted.
    assert launcher.returncode == 128 + stop, output[-3000:]
    # Each worker notes the signal once, whether the scheduler's or the agent's copy came first (two copies
    # that arrive together are one to Python; the repeat is tested in tests/training/test_preemption.py).
    assert output.count(f"{stop.name} received:") == 2, output[-3000:]
    assert "Traceback" not in output.split("torch.distributed.elastic")[0]
    summary = json.loads((run / "run_summary.json").read_text())
    assert summary["status"] == "preempted" and 3 <= summary["steps"] < BUDGET
    (checkpoint,) = list_checkpoints(run)
    assert read_state(checkpoint)["step"] == summary["steps"], "both processes stopped at one update"

    resume_to_the_end(command, run)
