"""Early stopping, for both algorithms: on the training reward, and on the held-out reward (evaluation.every)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_rl.training.checkpoints import list_checkpoints, read_state
from tests.conftest import ALGORITHMS, rows, run_ok


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_run_that_cannot_improve_stops_early(tmp_path: Path, algorithm: str) -> None:
    """Learning rate 0: the reward cannot improve by 0.5, so after 1 + patience rounds the run stops."""
    summary = run_ok(
        algorithm, tmp_path / "run",
        "training.max_steps=20", "training.learning_rate=0.0", "early_stopping.enabled=true",
        "early_stopping.patience=2", "early_stopping.rows_per_round=1", "early_stopping.min_delta=0.5",
    )  # fmt: skip
    assert summary["status"] == "early_stopped"
    assert summary["steps"] == 3, "one round sets the best, two more without improvement stop it"
    budget = 20 * rows(tmp_path / "run")[0]["samples"]
    assert summary["samples"] < budget
    (checkpoint,) = list_checkpoints(tmp_path / "run")
    assert read_state(checkpoint)["step"] == 3
    assert read_state(checkpoint)["early_stopping"]["rounds_without_improvement"] == 2
    assert (tmp_path / "run" / "final" / "config.json").exists()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_early_stopping_on_the_held_out_reward(tmp_path: Path, algorithm: str) -> None:
    """Learning rate 0 and greedy evaluation: the held-out reward repeats exactly, so it never improves."""
    summary = run_ok(
        algorithm, tmp_path / "run",
        "training.max_steps=20", "training.learning_rate=0.0", "evaluation.every=1", "data.arithmetic.num_eval=16",
        "early_stopping.enabled=true", "early_stopping.metric=eval/reward/mean", "early_stopping.patience=2",
        "early_stopping.rows_per_round=1",
    )  # fmt: skip
    assert summary["status"] == "early_stopped" and summary["steps"] == 3
    logged = rows(tmp_path / "run")
    assert len({row["eval/reward/mean"] for row in logged}) == 1
    assert all(row["eval/num_prompts"] == 16 for row in logged)
