"""scripts/benchmark.py: the hand-built raw TRL side still builds and trains, our PPO reports its phases,
the fit is right."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_entry

sys.path.insert(0, str(REPO / "scripts"))

from benchmark import PPO_PHASES, build_reward_model, fitted_exponent  # noqa: E402


def test_fitted_exponent_recovers_a_power_law() -> None:
    xs = [16, 32, 64, 128]
    assert fitted_exponent(xs, [3 * x**1.5 for x in xs]) == pytest.approx(1.5)
    assert fitted_exponent(xs, [7 / x for x in xs]) == pytest.approx(-1.0)


# One side per code path: TRL's GRPOTrainer built by hand, and our PPO run with its phase clock.
@pytest.mark.parametrize("side", ["grpo-trl", "ppo-ours"])
def test_each_side_trains_and_reports(tmp_path: Path, side: str) -> None:
    reward_model = build_reward_model(tmp_path / "reward_model")
    spec = {"side": side, "output": str(tmp_path / "run"), "steps": 3, "reward_model": str(reward_model),
            "overrides": ["checkpointing.every=2", "checkpointing.unit=steps"]}  # fmt: skip
    result = run_entry(["scripts/benchmark.py", "--worker", json.dumps(spec)], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    numbers = json.loads(result.stdout.strip().splitlines()[-1])
    assert numbers["seconds_per_step"] > 0 and numbers["peak_memory_mb"] > 0
    assert 0 < numbers["cpu_seconds_per_step"] < 50 * numbers["seconds_per_step"]
    assert (numbers["tokens_per_second"] is not None) == side.endswith("ours")
    assert 0 < numbers["save_seconds"] < 60, "the save after update 2 is timed on every code path"
    if side == "ppo-ours":
        parts = numbers["parts"]
        assert set(parts) == set(PPO_PHASES)
        assert all(seconds > 0 for seconds in parts.values()), parts
        assert sum(parts.values()) < numbers["seconds_per_step"] * 1.05, "phases of one update"
