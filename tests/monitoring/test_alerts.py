"""Alerts that fire on crafted runs, for both algorithms: a non-finite reward stops the run and no checkpoint
holds it, a stop alert saves the last good state, warn alerts are logged and the run goes on."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from llm_rl.run.training import train
from llm_rl.training.checkpoints import STATE_FILE, list_checkpoints, read_state
from tests.conftest import ALGORITHMS, in_process_recipe, rows, run_ok

CALLS = {"count": 0}


def overflows_from_the_third_call(prompts, completions, **kwargs):
    """A finite reward that, weighted, overflows float32 from its third call on."""
    CALLS["count"] += 1
    return [3e38 if CALLS["count"] >= 3 else 0.5 for _ in completions]


def constant_reward(prompts, completions, **kwargs):
    return [1.0 for _ in completions]


def all_finite(folder: Path) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in load_file(folder / "model.safetensors").values())


def test_nan_stops_the_run_and_no_checkpoint_holds_it(tmp_path: Path) -> None:
    # The recipe imports this module by its dotted path, as a module of its own.
    importlib.import_module("tests.monitoring.test_alerts").CALLS["count"] = 0
    run = tmp_path / "run"
    recipe = in_process_recipe(
        "ppo", run, "training.max_steps=8", "checkpointing.every=1", "checkpointing.unit=steps",
        "checkpointing.keep_last=10", "ppo.num_ppo_epochs=1",
        "rewards=[{name: 'tests.monitoring.test_alerts:overflows_from_the_third_call', weight: 10.0}]",
    )  # fmt: skip
    summary = train(recipe)
    assert summary["status"] == "stopped_by_alert"
    assert summary["steps"] < 8
    fired = [row for row in rows(run) if row.get("alerts/nonfinite")]
    assert fired and fired[0]["step"] == 3 and fired[0]["reward/mean"] is None
    checkpoints = list_checkpoints(run)
    assert checkpoints and all(all_finite(path) for path in checkpoints)
    assert all(read_state(path)["step"] < fired[0]["step"] or all_finite(path) for path in checkpoints)
    assert not (run / "final").exists() or all_finite(run / "final")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_stop_alert_saves_the_last_good_state(tmp_path: Path, algorithm: str) -> None:
    run = tmp_path / "run"
    summary = run_ok(algorithm, run, "training.max_steps=6", "monitoring.alerts.grad_norm.above=1e-9",
                     "monitoring.alerts.grad_norm.action=stop")  # fmt: skip
    # The first update with a gradient (a GRPO step whose groups all tie has none) stops the run.
    first = next(row for row in rows(run) if row["grad_norm"] > 1e-9)
    assert summary["status"] == "stopped_by_alert" and summary["steps"] == first["step"]
    assert first["alerts/grad_norm"] == 1.0
    (checkpoint,) = list_checkpoints(run)
    assert read_state(checkpoint)["step"] == first["step"] and (checkpoint / STATE_FILE).exists()


def test_warn_alerts_are_logged_and_the_run_goes_on(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    recipe = in_process_recipe(
        "ppo", run, "training.max_steps=4", "monitoring.alerts.kl.above=1e-12",
        "monitoring.alerts.value_loss.above=1e-9", "monitoring.alerts.reward_collapse.rows=2",
        "rewards=[{name: 'tests.monitoring.test_alerts:constant_reward'}]",
    )  # fmt: skip
    assert train(recipe)["status"] == "completed"
    logged = rows(run)
    assert len(logged) == 4
    assert all(row.get("alerts/value_loss") == 1.0 for row in logged)
    assert [row["step"] for row in logged if row.get("alerts/reward_collapse")] == [2]
    assert "alert at step 2: reward_collapse" in capsys.readouterr().err
    kl_rows = [row for row in logged if row["kl"] > 1e-12]
    assert kl_rows, "the policy moved away from the reference"
    assert all(row.get("alerts/kl") == 1.0 for row in kl_rows)
