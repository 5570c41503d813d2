"""Checkpoints, for both algorithms: cadence, rotation, atomic writes, resume after a crash (a real SIGKILL),
and rollback."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from llm_rl.training.checkpoints import STAGING_DIR, CheckpointManager, list_checkpoints, read_state
from llm_rl.training.early_stopping import MetricWindow
from tests.conftest import ALGORITHMS, LLM_RL, REPO, entry, rows, run_entry, run_ok

# --------------------------------------------------------------------------------------------------
# Cadence, rotation, atomicity
# --------------------------------------------------------------------------------------------------


def test_cadence_in_samples_names_folders_by_samples_and_keeps_the_best(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_ok("ppo", run, "training.max_steps=6", "checkpointing.every=32", "checkpointing.keep_last=1",
           "early_stopping.rows_per_round=2")  # fmt: skip
    states = {path.name: read_state(path) for path in list_checkpoints(run)}
    newest = "checkpoint-96"
    assert newest in states, states
    # Saved every 32 samples (2 updates of 16): 32, 64, 96; keep_last 1 keeps the newest and the best.
    scores = {}
    for row_index in (2, 4, 6):
        window = [row["reward/mean"] for row in rows(run)[row_index - 2 : row_index]]
        scores[f"checkpoint-{16 * row_index}"] = sum(window) / 2
    best = max(scores, key=scores.get)
    assert set(states) == {newest, best}
    for name, state in states.items():
        assert state["score"] == pytest.approx(scores[name])
        assert state["samples"] == int(name.split("-")[1])
    assert not (run / STAGING_DIR).exists()


def test_cadence_in_steps(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_ok("grpo", run, "training.max_steps=3", "checkpointing.every=1", "checkpointing.unit=steps",
           "checkpointing.keep_last=5")  # fmt: skip
    per_step = rows(run)[0]["samples"]
    assert [path.name for path in list_checkpoints(run)] == [f"checkpoint-{per_step * k}" for k in (1, 2, 3)]


def test_a_half_written_checkpoint_is_ignored_and_cleared(tmp_path: Path) -> None:
    run = tmp_path / "run"
    common = ["checkpointing.every=2", "checkpointing.unit=steps", "training.lr_scheduler=constant"]
    run_ok("ppo", run, "training.max_steps=2", *common)
    # What a crash while writing the next checkpoint leaves: a staged folder, and a folder without state.
    staged = run / STAGING_DIR / "checkpoint-4"
    staged.mkdir(parents=True)
    (staged / "model.safetensors").write_bytes(b"truncated")
    (run / "checkpoint-48").mkdir()
    (run / "checkpoint-48" / "trainer_state.json").write_text("{}")
    summary = run_ok("ppo", run, "training.max_steps=4", *common)
    assert Path(summary["resumed_from"]).name == "checkpoint-32"
    assert summary["status"] == "completed"
    assert not (run / STAGING_DIR).exists()
    assert [row["step"] for row in rows(run)] == [1, 2, 3, 4]


# --------------------------------------------------------------------------------------------------
# Resume after a crash, and exactness
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_killed_run_started_again_finishes_its_budget(tmp_path: Path, algorithm: str) -> None:
    run = tmp_path / "run"
    command = [sys.executable, *entry(algorithm, run, "training.max_steps=12", "checkpointing.every=2",
                                      "checkpointing.unit=steps")]  # fmt: skip
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not list_checkpoints(run) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not (run / "run_summary.json").exists()
    killed_at = read_state(list_checkpoints(run)[0])["step"]
    assert killed_at < 12

    result = run_entry(command[1:])
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run / "run_summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["resumed_from"] is not None
    per_step = rows(run)[0]["samples"]
    assert summary["steps"] == 12 and summary["samples"] == 12 * per_step
    assert [row["step"] for row in rows(run)] == list(range(1, 13)), "one row per step, none twice"


def test_a_second_training_in_a_busy_run_folder_is_refused_naming_the_first(tmp_path: Path) -> None:
    """As after `kill -9` of `accelerate launch` whose training child kept running: the same command
    again must not write into the folder beside it. Once the first is gone, the folder is free."""
    run = tmp_path / "run"
    command = [sys.executable, *entry("ppo", run, "training.max_steps=100000")]
    first = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not rows_written(run) and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.poll() is None, "the first training ended early"
        second = run_entry(command[1:])
        assert second.returncode == 2, second.stderr[-2000:]
        assert second.stderr.strip() == (
            f"error: {run}: another training (pid {first.pid}) is writing this run folder; stop it "
            "first, or set run.output_dir to train elsewhere"
        ), second.stderr[-2000:]
        assert first.poll() is None, "the first goes on"
    finally:
        first.kill()
        first.wait()
    after = run_entry(entry("ppo", run, "training.max_steps=2", "checkpointing.resume=never"))
    assert after.returncode == 0, after.stderr[-2000:]


def rows_written(run: Path) -> bool:
    path = run / "metrics.jsonl"
    return path.exists() and path.stat().st_size > 0


@pytest.mark.floors
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_resumed_run_ends_with_the_same_weights_as_a_straight_one(tmp_path: Path, algorithm: str) -> None:
    common = ["checkpointing.every=2", "checkpointing.unit=steps", "training.lr_scheduler=constant"]
    run_ok(algorithm, tmp_path / "straight", "training.max_steps=4", *common)
    run_ok(algorithm, tmp_path / "resumed", "training.max_steps=2", *common)
    run_ok(algorithm, tmp_path / "resumed", "training.max_steps=4", *common)
    straight = load_file(tmp_path / "straight" / "final" / "model.safetensors")
    resumed = load_file(tmp_path / "resumed" / "final" / "model.safetensors")
    assert straight.keys() == resumed.keys()
    for key in straight:
        torch.testing.assert_close(resumed[key], straight[key], rtol=0, atol=1e-6, msg=key)


# --------------------------------------------------------------------------------------------------
# Rollback
# --------------------------------------------------------------------------------------------------


def test_rollback_moves_later_checkpoints_aside_and_the_next_run_resumes_there(tmp_path: Path) -> None:
    run = tmp_path / "run"
    common = ["checkpointing.every=2", "checkpointing.unit=steps", "checkpointing.keep_last=5"]
    run_ok("ppo", run, "training.max_steps=4", *common)
    result = run_entry(["rollback", str(run), "--to", "checkpoint-32"], launcher=[LLM_RL])
    assert result.returncode == 0, result.stderr
    assert [path.name for path in list_checkpoints(run)] == ["checkpoint-32"]
    (aside,) = (run / "rolled_back").iterdir()
    assert sorted(path.name for path in aside.iterdir()) == [
        "checkpoint-64", "final", "metrics.jsonl", "run_summary.json"
    ]  # fmt: skip
    assert [row["step"] for row in rows(run)] == [1, 2]
    summary = run_ok("ppo", run, "training.max_steps=4", *common)
    assert Path(summary["resumed_from"]).name == "checkpoint-32"
    assert [row["step"] for row in rows(run)] == [1, 2, 3, 4]

    result = run_entry(["rollback", str(run), "--to", "checkpoint-7"], launcher=[LLM_RL])
    assert result.returncode == 2 and "not a complete checkpoint" in result.stderr


def test_rollback_to_the_best(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_ok("ppo", run, "training.max_steps=6", "checkpointing.every=2", "checkpointing.unit=steps",
           "checkpointing.keep_last=5", "early_stopping.rows_per_round=2")  # fmt: skip
    scores = {path.name: read_state(path)["score"] for path in list_checkpoints(run)}
    result = run_entry(["rollback", str(run), "--best"], launcher=[LLM_RL])
    assert result.returncode == 0, result.stderr
    assert list_checkpoints(run)[-1].name == max(scores, key=scores.get)


# --------------------------------------------------------------------------------------------------
# Damaged checkpoints: complete by name, unreadable since
# --------------------------------------------------------------------------------------------------


def cut_short(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGES = {
    "ppo weights cut short": ("ppo", "model.safetensors", cut_short),
    "ppo optimizer cut short": ("ppo", "optimizer.pt", cut_short),
    "ppo value model missing": ("ppo", "value_model/model.safetensors", Path.unlink),
    "ppo state garbled": ("ppo", "llm_rl_state.json", lambda path: path.write_text('{"step": 2,')),
    "grpo weights cut short": ("grpo", "model.safetensors", cut_short),
}
EVERY_STEP = ["checkpointing.every=1", "checkpointing.unit=steps", "checkpointing.keep_last=5"]


@pytest.fixture(scope="module")
def two_step_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A finished run of each algorithm family with a checkpoint after each of its 2 updates."""
    root = tmp_path_factory.mktemp("damaged")
    return {
        algorithm: (
            run_ok(algorithm, root / algorithm, "training.max_steps=2", *EVERY_STEP) and root / algorithm
        )
        for algorithm in ("ppo", "grpo")
    }


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_checkpoint_is_refused_by_name_and_passed_over_by_auto(
    two_step_runs: dict[str, Path], tmp_path: Path, damage: str
) -> None:
    algorithm, name, spoil = DAMAGES[damage]
    run = tmp_path / "run"
    shutil.copytree(two_step_runs[algorithm], run)
    older, newest = list_checkpoints(run)
    spoil(newest / name)
    named = str(newest / name)

    # Named by the user (resume, rollback, export): refused, exit 2, one line naming the file.
    for args, launcher in [
        (entry(algorithm, run, "training.max_steps=3", f"checkpointing.resume={newest}", *EVERY_STEP), None),
        (["rollback", str(run), "--to", newest.name], [LLM_RL]),
        (["export", str(newest), "-o", str(tmp_path / "exported")], [LLM_RL]),
    ]:
        result = run_entry(args, launcher=launcher)
        assert result.returncode == 2, (args, result.stderr[-2000:])
        error = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert len(error) == 1 and error[0].startswith(f"error: {named}: "), result.stderr[-2000:]
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "exported").exists()

    # resume: auto takes the newest checkpoint that reads whole, says which it passed over, and finishes.
    result = run_entry(entry(algorithm, run, "training.max_steps=3", *EVERY_STEP))
    assert result.returncode == 0, result.stderr[-3000:]
    warning = f"warning: {newest.name} is damaged ({named}: "
    assert warning in result.stderr and f"resuming from {older.name}" in result.stderr
    summary = json.loads((run / "run_summary.json").read_text())
    assert Path(summary["resumed_from"]) == older and summary["status"] == "completed"
    assert [row["step"] for row in rows(run)] == [1, 2, 3], "no gap and no duplicate"


def test_rotation_keeps_the_newest_checkpoint_that_reads(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_ok("ppo", run, "training.max_steps=2", *EVERY_STEP)
    older, newest = list_checkpoints(run)
    cut_short(newest / "model.safetensors")
    for checkpoint in (older, newest):  # no best checkpoint to keep for its score
        state = read_state(checkpoint)
        (checkpoint / "llm_rl_state.json").write_text(json.dumps({**state, "score": None}))
    manager = CheckpointManager(lambda *_: 0, keep_last=1, score=MetricWindow("reward/mean", 1, "max"))
    manager.rotate(run)
    assert list_checkpoints(run) == [older, newest], "keep_last 1 keeps the newest, and the last that reads"


# --------------------------------------------------------------------------------------------------
# A finished run, run again
# --------------------------------------------------------------------------------------------------


def folder_snapshot(run: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(run)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in run.rglob("*")
        if p.is_file()
    }


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_a_finished_run_run_again_says_so_and_changes_nothing(tmp_path: Path, algorithm: str) -> None:
    run = tmp_path / "run"
    run_ok(algorithm, run, "training.max_steps=2", *EVERY_STEP)
    before = folder_snapshot(run)
    again = run_entry(entry(algorithm, run, "training.max_steps=2", *EVERY_STEP))
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"{run}: already finished (completed, 2 steps" in again.stderr
    assert folder_snapshot(run) == before, "not a file written, not a row added"
    # A larger budget trains on from the newest checkpoint.
    summary = run_ok(algorithm, run, "training.max_steps=3", *EVERY_STEP)
    assert (summary["status"], summary["steps"]) == ("completed", 3)
    assert [row["step"] for row in rows(run)] == [1, 2, 3]


def test_a_run_killed_after_its_last_checkpoint_finishes_without_training_more(tmp_path: Path) -> None:
    """The last checkpoint is at the budget, but final/ and the summary were never written."""
    run = tmp_path / "run"
    run_ok("grpo", run, "training.max_steps=2", *EVERY_STEP)
    shutil.rmtree(run / "final")
    (run / "run_summary.json").unlink()
    summary = run_ok("grpo", run, "training.max_steps=2", *EVERY_STEP)
    assert (summary["status"], summary["steps"]) == ("completed", 2)
    assert [row["step"] for row in rows(run)] == [1, 2]
    assert (run / "final" / "config.json").exists()


# --------------------------------------------------------------------------------------------------
# Preemption: SIGTERM or SIGUSR1
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("algorithm", "stop"), [("ppo", signal.SIGTERM), ("grpo", signal.SIGUSR1)])
def test_a_preempted_run_checkpoints_where_it_stopped_and_resumes_with_no_sample_lost(
    tmp_path: Path, algorithm: str, stop: signal.Signals
) -> None:
    run = tmp_path / "run"
    command = [sys.executable, *entry(algorithm, run, "training.max_steps=30")]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not rows_written(run) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before the signal"
    process.send_signal(stop)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 75, stderr[-3000:]
    assert f"preempted ({stop.name}): checkpoint at step" in stderr and "Traceback" not in stderr
    summary = json.loads((run / "run_summary.json").read_text())
    assert summary["status"] == "preempted" and summary["steps"] < 30
    assert 0 <= summary["seconds_from_signal_to_exit"] < 60
    (checkpoint,) = list_checkpoints(run)
    assert read_state(checkpoint)["step"] == summary["steps"], "a checkpoint where it stopped"
    assert not (run / "final").exists(), "not finished"

    result = run_entry(command[1:])
    assert result.returncode == 0, result.stderr[-3000:]
    assert [row["step"] for row in rows(run)] == list(range(1, 31)), "no sample lost, none twice"
