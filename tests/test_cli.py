"""Bad input through the real command line: exit code 2, one message naming the problem, no traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from conftest import run_entry

LLM_RL = str(Path(sys.executable).parent / "llm-rl")


def write_recipe(path: Path, **sections) -> Path:
    base = {
        "model": {"policy": "builtin:tiny-arithmetic"},
        "data": {"source": "builtin:arithmetic"},
        "rewards": [{"name": "accuracy", "mode": "exact"}],
        "training": {"max_steps": 1, "per_device_batch_size": 8},
        "grpo": {"num_generations": 4},
        "monitoring": {"wandb": {"mode": "disabled"}},
        "run": {"output_dir": str(path.parent / "run")},
    }
    base.update(sections)
    path.write_text(yaml.safe_dump(base))
    return path


def prompts_file(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text(
        "".join(json.dumps({"question": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(4))
    )
    return path


CASES = {
    "unknown key": (lambda tmp: {"trainin": {}}, "trainin: unknown key (did you mean 'training'?)"),
    "wrong type": (
        lambda tmp: {"training": {"max_steps": "many"}},
        "training.max_steps: input should be a valid integer",
    ),
    "missing dataset file": (lambda tmp: {"data": {"source": str(tmp / "nope.jsonl")}}, "nope.jsonl"),
    "missing column": (
        lambda tmp: {"data": {"source": str(prompts_file(tmp)), "prompt_column": "prompt_text"}},
        "prompt_text",
    ),
    "unknown reward": (lambda tmp: {"rewards": [{"name": "accuracyy"}]}, "accuracyy"),
    "reward module that does not import": (
        lambda tmp: {"rewards": [{"name": "no_such_pkg.rewards:score"}]},
        "no_such_pkg",
    ),
    "unknown builtin model": (lambda tmp: {"model": {"policy": "builtin:huge"}}, "builtin:huge"),
    "missing model folder": (lambda tmp: {"model": {"policy": str(tmp / "no-model")}}, "no-model"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_exits_2_with_one_message(tmp_path: Path, case: str) -> None:
    sections, expected = CASES[case]
    recipe = write_recipe(tmp_path / "recipe.yaml", **sections(tmp_path))
    result = run_entry(["train", str(recipe)], launcher=[LLM_RL], timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    message = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(message) == 1, result.stderr
    assert expected in message[0]
    assert not (tmp_path / "run").exists(), "bad input must not create a run folder"


def test_entry_point_reports_bad_input_the_same_way(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path / "recipe.yaml", training={"learning_rat": 0.1})
    result = run_entry(["recipes/ppo.py", "--config", str(recipe)], timeout=120)
    assert result.returncode == 2
    assert "training.learning_rat: unknown key (did you mean 'learning_rate'?)" in result.stderr
    assert "Traceback" not in result.stderr


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path / "recipe.yaml", trainin={})
    result = run_entry(["validate", str(recipe), "--debug"], launcher=[LLM_RL], timeout=120)
    assert result.returncode != 0
    assert "Traceback" in result.stderr


def test_validate_summarises_without_training(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path / "recipe.yaml")
    result = run_entry(
        ["validate", str(recipe), "--set", "training.max_steps=3"], launcher=[LLM_RL], timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "recipe OK: GRPO" in result.stdout
    assert "3 updates x 8 samples = 24 samples" in result.stdout
    assert "accuracy" in result.stdout
    assert not (tmp_path / "run").exists()


def test_validate_accepts_gsm8k_recipe(tmp_path: Path, gsm8k_dir: Path) -> None:
    recipe = write_recipe(
        tmp_path / "recipe.yaml",
        data={"source": str(gsm8k_dir / "test.jsonl"), "prompt_column": "question", "columns": ["answer"]},
        rewards=[{"name": "accuracy"}],
    )
    result = run_entry(["validate", str(recipe)], launcher=[LLM_RL], timeout=120)
    assert result.returncode == 0, result.stderr
    assert "1319 training prompts" in result.stdout
