"""`llm-rl validate`: a recipe summarised without training, on the embedded task and on GSM8K."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LLM_RL, run_entry, write_recipe


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


def test_validate_refuses_evaluation_without_eval_prompts(tmp_path: Path) -> None:
    recipe = write_recipe(
        tmp_path / "recipe.yaml",
        data={"source": "builtin:arithmetic", "arithmetic": {"num_eval": 0}},
        evaluation={"every": 1},
    )
    result = run_entry(["validate", str(recipe)], launcher=[LLM_RL], timeout=120)
    assert result.returncode == 2
    assert "evaluation.every is set but the data has no eval prompts" in result.stderr
    assert "data.eval_size" in result.stderr


def test_validate_names_the_eval_prompts_it_will_use(tmp_path: Path) -> None:
    recipe = write_recipe(
        tmp_path / "recipe.yaml", evaluation={"every": 1}, data={"source": "builtin:arithmetic"}
    )
    result = run_entry(["validate", str(recipe)], launcher=[LLM_RL], timeout=120)
    assert result.returncode == 0, result.stderr
    assert "eval      every 1 updates on 200 held-out prompts" in result.stdout


def test_validate_says_the_starting_policy_is_evaluated(tmp_path: Path) -> None:
    recipe = write_recipe(
        tmp_path / "recipe.yaml",
        evaluation={"every": 2, "at_start": True},
        data={"source": "builtin:arithmetic", "arithmetic": {"num_eval": 30}},
    )
    result = run_entry(["validate", str(recipe)], launcher=[LLM_RL], timeout=120)
    assert result.returncode == 0, result.stderr
    assert "eval      every 2 updates and before the first update on 30 held-out prompts" in result.stdout
    alone = write_recipe(tmp_path / "alone.yaml", evaluation={"at_start": True})
    result = run_entry(["validate", str(alone)], launcher=[LLM_RL], timeout=120)
    assert "eval      before the first update on 200 held-out prompts" in result.stdout, result.stderr


def test_validate_refuses_a_run_shorter_than_its_logging_steps(tmp_path: Path) -> None:
    """It would write no metric row and end with no reward at all."""
    recipe = write_recipe(tmp_path / "recipe.yaml")
    result = run_entry(
        ["validate", str(recipe), "--set", "training.max_steps=2", "--set", "training.logging_steps=5"],
        launcher=[LLM_RL],
        timeout=120,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        "training.logging_steps (5) is more than the run's 2 updates: it would write no metric row"
        in result.stderr
    )
