"""scripts/real_model_check.py on SmolLM2-135M-Instruct, shrunk to two small updates of each algorithm:
the run folders with their evaluations before and after, `llm-rl compare`'s report with the held-out
curve, the printed table and the JSON record. No learning threshold: two updates cannot show one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_entry

pytestmark = pytest.mark.slow

SCRIPT = "scripts/real_model_check.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Two updates of 4 samples (GRPO: 1 prompt x 4 answers; PPO: 4 prompts), scored on 8 held-out sums;
# 12 tokens hold the model's usual answer ("18 + 46 = 64").
FEW_UPDATES = [
    "training.total_samples=8",
    "training.per_device_batch_size=4",
    "grpo.num_generations=4",
    "ppo.critic_warmup_steps=1",
    "evaluation.every=2",
    "data.arithmetic.num_eval=8",
    "generation.max_new_tokens=12",
]


def sets(*overrides: str) -> list[str]:
    return [arg for override in overrides for arg in ("--set", override)]


def test_both_algorithms_train_from_the_same_start_and_are_compared(tmp_path: Path) -> None:
    root = tmp_path / "check"
    result = run_entry([SCRIPT, "--budget-minutes", "15", "--output-root", str(root), *sets(*FEW_UPDATES)],
                       timeout=1200)  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]

    record = json.loads((root / "real_model_check.json").read_text())
    runs = {run["algorithm"]: run for run in record["runs"]}
    assert list(runs) == ["grpo", "ppo"]
    for algorithm, run in runs.items():
        rows = [json.loads(line) for line in (root / algorithm / "metrics.jsonl").read_text().splitlines()]
        evaluated = [row for row in rows if "eval/reward/mean" in row]
        assert [row["step"] for row in evaluated] == [0, 2], "the starting policy, then the last update"
        assert all(row["eval/num_prompts"] == 8 for row in evaluated)
        assert run["status"] == "completed" and run["samples"] == 8
        assert run["held_out_before"] == evaluated[0]["eval/reward/mean"]
        assert run["held_out_after"] == evaluated[-1]["eval/reward/mean"]
        assert run["gain"] == pytest.approx(run["held_out_after"] - run["held_out_before"])
        assert run["samples_per_second"] > 0
        assert (root / algorithm / "final" / "config.json").exists()
        line = next(line.split() for line in result.stdout.splitlines() if line.startswith(f"{algorithm} "))
        assert line[:4] == [algorithm, "completed", "8", f"{run['held_out_before']:.3f}"]
    start = {run["held_out_before"] for run in runs.values()}
    assert len(start) == 1, "same model, same held-out sums, greedy: the same starting reward"

    report = (root / "report" / "report.md").read_text()
    assert "| held-out reward, first evaluation |" in report
    assert (root / "report" / "eval_reward.png").read_bytes()[:8] == PNG_MAGIC
    assert "target grpo gain >= 0.15" in result.stdout and "target PPO after >= GRPO after" in result.stdout
    assert record["target"] == [line for line in result.stdout.splitlines() if line.startswith("target ")]


def test_a_recipe_either_algorithm_refuses_exits_2_before_anything_trains(tmp_path: Path) -> None:
    root = tmp_path / "check"
    result = run_entry(
        [SCRIPT, "--output-root", str(root), *sets("ppo.critic_warmup_steps=1000")], timeout=300
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.startswith("ppo: ") and "ppo.critic_warmup_steps (1000)" in result.stderr
    assert "Traceback" not in result.stderr
    assert not root.exists(), "GRPO did not train first"
