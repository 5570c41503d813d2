"""`llm-rl doctor` on crafted metric files: one per finding, a healthy run with none, and a staged run."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import yaml

from llm_rl.tools.doctor import diagnose
from tests.conftest import LLM_RL, run_entry

ROWS = 100


def healthy_row(step: int, rng: random.Random, algorithm: str) -> dict:
    """A run that learns: reward rising with noise, KL small, grad norm under 1, entropy easing off."""
    progress = step / ROWS
    row = {
        "step": step,
        "samples": 64 * step,
        "reward/mean": 0.2 + 0.6 * progress + rng.gauss(0, 0.04),
        "reward/std": 0.3,
        "kl": 0.02 + 0.01 * progress + abs(rng.gauss(0, 0.005)),
        "grad_norm": 0.5 + rng.random() * 0.3,
        "entropy": 1.0 - 0.3 * progress,
        "completion_length/mean": 20 + rng.random() * 4,
        "samples_per_second": 100 + rng.gauss(0, 5),
    }
    if algorithm == "grpo":
        row["reward/frac_zero_std"] = 0.1
        row["completion_length/clipped_ratio"] = 0.02
    else:
        row["value/explained_variance"] = 0.5
    return row


# Each case: (algorithm, how a healthy row is changed, the finding it must produce).
CASES = {
    "grpo groups without spread": (
        "grpo",
        lambda row, p: {**row, "reward/mean": 0.1 + 0.01 * math.sin(p * 20), "reward/frac_zero_std": 0.9},
        ("reward flat", "frac_zero_std"),
    ),
    "ppo critic lagging": (
        "ppo",
        lambda row, p: {**row, "reward/mean": 0.3, "value/explained_variance": -0.2},
        ("reward flat", "critic lags"),
    ),
    "ppo critic fitting too fast": (
        "ppo",
        lambda row, p: {**row, "reward/mean": 0.3, "value/explained_variance": 0.99},
        ("reward flat", "leaving advantages near 0"),
    ),
    "reward swinging": (
        "grpo",
        lambda row, p: {**row, "reward/mean": 0.2 + 0.6 * p + 0.5 * math.sin(p * 2 * math.pi * 5)},
        ("reward swinging", "fell back"),
    ),
    "kl drifting": (
        "ppo",
        lambda row, p: {**row, "kl": 0.02 + 2.0 * p * p},
        ("KL drifting up", "ppo.kl_coef"),
    ),
    "grad norm high": (
        "grpo",
        lambda row, p: {**row, "grad_norm": 3.0 if p > 0.4 else 0.5},
        ("grad norm high", "above 1"),
    ),
    "entropy collapsing": (
        "grpo",
        lambda row, p: {**row, "entropy": max(0.05, 1.0 - 5 * p)},
        ("entropy collapsing early", "by step"),
    ),
    "completions truncated": (
        "grpo",
        lambda row, p: {**row, "completion_length/clipped_ratio": 0.6},
        ("completions truncated", "length limit"),
    ),
    "throughput falling": (
        "ppo",
        lambda row, p: {**row, "samples_per_second": 100 * (1 - 0.6 * p)},
        ("throughput falling", "samples_per_second"),
    ),
}


def write_run(folder: Path, algorithm: str, change=None) -> Path:
    rng = random.Random(0)
    folder.mkdir(parents=True)
    rows = [healthy_row(step, rng, algorithm) for step in range(1, ROWS + 1)]
    if change is not None:
        rows = [change(row, row["step"] / ROWS) for row in rows]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    recipe = {
        "algorithm": algorithm,
        "generation": {"max_new_tokens": 64},
        "training": {"max_grad_norm": 1.0},
    }
    (folder / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    return folder


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_a_healthy_run_has_no_findings(tmp_path: Path, algorithm: str) -> None:
    findings, rows = diagnose(write_run(tmp_path / "run", algorithm))
    assert rows == ROWS and findings == []


@pytest.mark.parametrize("case", list(CASES))
def test_each_problem_is_named_with_its_evidence(tmp_path: Path, case: str) -> None:
    algorithm, change, (name, words) = CASES[case]
    findings, _ = diagnose(write_run(tmp_path / "run", algorithm, change))
    assert [f.name for f in findings] == [name], [(f.name, f.evidence) for f in findings]
    assert words in findings[0].evidence + findings[0].advice


def test_a_staged_run_is_judged_stage_by_stage(tmp_path: Path) -> None:
    """A fast healthy GRPO stage, then a PPO stage at half its throughput whose KL drifts up."""
    rng = random.Random(1)
    grpo_rows = [
        {**healthy_row(step, rng, "grpo"), "stage": 0, "samples_per_second": 200.0} for step in range(1, 101)
    ]
    ppo_rows = [
        {
            **healthy_row(step, rng, "ppo"),
            "step": 100 + step,
            "stage": 1,
            "kl": 0.02 + 2.0 * (step / 100) ** 2,
        }
        for step in range(1, 101)
    ]
    run = tmp_path / "staged"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in grpo_rows + ppo_rows))
    stages = [{"name": "grpo", "max_steps": 100}, {"name": "ppo", "max_steps": 100}]
    (run / "recipe.yaml").write_text(yaml.safe_dump({"algorithm": "grpo", "stages": stages}))
    for index, (stage, algorithm) in enumerate(zip(stages, ["grpo", "ppo"], strict=True)):
        folder = run / "stages" / f"{index:02d}-{stage['name']}"
        folder.mkdir(parents=True)
        (folder / "recipe.yaml").write_text(yaml.safe_dump({"algorithm": algorithm}))
    findings, rows = diagnose(run)
    assert rows == 200
    assert [f.name for f in findings] == ["stage 01-ppo: KL drifting up"]
    assert "ppo.kl_coef" in findings[0].advice


def test_doctor_command(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", "ppo", CASES["kl drifting"][1])
    result = run_entry(["doctor", str(run)], launcher=[LLM_RL], timeout=60)
    assert result.returncode == 0, result.stderr
    assert "KL drifting up" in result.stdout and "try: " in result.stdout
    missing = run_entry(["doctor", str(tmp_path / "nope")], launcher=[LLM_RL], timeout=60)
    assert (
        missing.returncode == 2 and "not a run folder" in missing.stderr and "Traceback" not in missing.stderr
    )


def test_a_short_run_is_too_short_to_judge(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "samples": 8, "reward/mean": 0.1}) + "\n")
    result = run_entry(["doctor", str(run)], launcher=[LLM_RL], timeout=60)
    assert "too few to judge" in result.stdout
