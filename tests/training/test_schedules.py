"""Scheduled settings: the value each kind of schedule gives, and a PPO clip-range schedule that reaches the loss."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from llm_rl.recipe.load import load_recipe
from tests.conftest import rows, run_entry


def schedule(text: str):
    return load_recipe(None, [f"schedules={{ppo.kl_coef: {text}}}"]).schedules["ppo.kl_coef"]


def test_schedule_values() -> None:
    linear = schedule("{kind: linear, start: 0.2, end: 0.3, samples: 1000, begin: 500}")
    assert [linear.value_at(s) for s in (0, 500, 1000, 1500, 9000)] == pytest.approx(
        [0.2, 0.2, 0.25, 0.3, 0.3]
    )
    cosine = schedule("{kind: cosine, start: 1.0, end: 0.0, samples: 100}")
    assert cosine.value_at(0) == pytest.approx(1.0)
    assert cosine.value_at(25) == pytest.approx(0.5 + 0.5 * math.cos(math.pi / 4))
    assert cosine.value_at(100) == pytest.approx(0.0) == cosine.value_at(200)
    halving = schedule("{kind: step, start: 0.04, factor: 0.5, every: 100000, limit: 0.01}")
    assert [halving.value_at(s) for s in (0, 99_999, 100_000, 250_000, 900_000)] == pytest.approx(
        [0.04, 0.04, 0.02, 0.01, 0.01]
    )
    assert schedule("{kind: constant, value: 0.05}").value_at(10**9) == 0.05


def test_a_ppo_schedule_reaches_the_loss(tmp_path: Path) -> None:
    """A clip range that drops from 100 (never clips) to 1e-6 (clips nearly every token) after 32 samples."""
    cliprange = "{ppo.cliprange: {kind: step, start: 100.0, factor: 1.0e-8, every: 32}}"
    result = run_entry(
        [
            "recipes/ppo.py",
            *("--set", f"run.output_dir={tmp_path}", "--set", "monitoring.wandb.mode=disabled"),
            *("--set", "training.per_device_batch_size=16", "--set", "training.total_samples=64"),
            *("--set", "monitoring.progress=false", "--set", f"schedules={cliprange}"),
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = rows(tmp_path)
    assert [row["schedule/ppo.cliprange"] for row in table] == pytest.approx([100.0, 100.0, 1e-6, 1e-6])
    assert [row["policy/clipfrac"] for row in table[:2]] == [0.0, 0.0]
    assert all(row["policy/clipfrac"] > 0.05 for row in table[2:])
