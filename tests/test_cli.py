"""Bad input through the real command line: exit code 2, one message naming the problem, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ACCELERATE_LAUNCH, LLM_RL, run_entry, sets, write_recipe


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
    "NaN reward weight": (
        lambda tmp: {"rewards": [{"name": "accuracy", "mode": "exact", "weight": float("nan")}]},
        "rewards[0].weight: nan is not a finite number",
    ),
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


@pytest.mark.parametrize("quiet", [False, True])
def test_bad_input_under_accelerate_launch_is_said_first_and_touches_nothing(
    tmp_path: Path, quiet: bool
) -> None:
    """accelerate's launcher ends with its own exit code 1 whatever its process's code was, and adds a
    traceback of its own unless `--quiet` (README, "Exit codes")."""
    run = tmp_path / "run"
    launcher = [*ACCELERATE_LAUNCH, "--num_processes", "1", "--cpu", *(["--quiet"] if quiet else [])]
    overrides = sets("training.max_stepz=2", f"run.output_dir={run}")
    result = run_entry(["recipes/ppo.py", *overrides], launcher=launcher, timeout=120)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].endswith(
        "training.max_stepz: unknown key (did you mean 'max_steps'?)"
    )
    if quiet:
        assert "Traceback" not in result.stderr
    else:
        assert result.stderr.index(errors[0]) < result.stderr.index("Traceback"), "llm_rl's line comes first"
        assert "returned non-zero exit status 2" in result.stderr
    assert not run.exists(), "bad input must not create a run folder"


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path / "recipe.yaml", trainin={})
    result = run_entry(["validate", str(recipe), "--debug"], launcher=[LLM_RL], timeout=120)
    assert result.returncode != 0
    assert "Traceback" in result.stderr
