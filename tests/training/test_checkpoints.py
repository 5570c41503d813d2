"""Checkpoints, for both algorithms: cadence, rotation, atomic writes, resume after a crash (a real SIGKILL),
and rollback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from llm_rl.training.checkpoints import STAGING_DIR, list_checkpoints, read_state
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
