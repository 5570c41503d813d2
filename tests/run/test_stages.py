"""Staged runs: a recipe whose algorithm and settings change from stage to stage, in one run folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from llm_rl.errors import RecipeError
from llm_rl.recipe.load import load_recipe
from tests.conftest import LLM_RL, REPO, rows, run_entry

STAGED = REPO / "recipes" / "arithmetic" / "staged.yaml"

# The embedded staged recipe, shrunk to four updates a stage, with a checkpoint every two updates.
SMALL_STAGED = """\
extends: {staged}
run: {{output_dir: {output}}}
training: {{per_device_batch_size: 16}}
checkpointing: {{every: 2, unit: steps, keep_last: 4}}
monitoring: {{wandb: {{mode: disabled}}, progress: false}}
schedules:
  ppo.cliprange: {{kind: linear, start: 0.2, end: 0.3, samples: 64, begin: 128}}
stages:
  - {{name: grpo-group4, total_samples: 64, overrides: {{grpo: {{num_generations: 4}}}}}}
  - {{name: grpo-group8, total_samples: 64, overrides: {{grpo: {{num_generations: 8}}}}}}
  - name: ppo
    total_samples: 64
    overrides:
      algorithm: ppo
      ppo: {{num_ppo_epochs: 2, kl_coef: 0.0, critic_learning_rate: 1.0e-3, critic_warmup_steps: 1}}
"""


def train_staged(recipe: Path) -> None:
    result = run_entry([LLM_RL, "train", str(recipe)], launcher=[])
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def staged_run(tmp_path_factory) -> Path:
    """Two GRPO stages (groups of 4, then 8) and a PPO stage, trained once for the module."""
    folder = tmp_path_factory.mktemp("staged")
    recipe = folder / "recipe_in.yaml"
    recipe.write_text(SMALL_STAGED.format(staged=STAGED, output=folder / "run"))
    train_staged(recipe)
    return folder


def test_stages_run_in_turn_into_one_run_folder(staged_run: Path) -> None:
    run = staged_run / "run"
    summary = json.loads((run / "run_summary.json").read_text())
    assert summary["status"] == "completed"
    assert [s["name"] for s in summary["stages"]] == ["grpo-group4", "grpo-group8", "ppo"]
    assert [s["algorithm"] for s in summary["stages"]] == ["grpo", "grpo", "ppo"]
    assert (summary["steps"], summary["samples"]) == (12, 192)
    # The run's final policy is the last stage's, critic included.
    assert (run / "final" / "model.safetensors").exists()
    assert (run / "final" / "value_model" / "model.safetensors").exists()
    # Each stage starts from the one before it.
    second = json.loads(json.dumps(load_recipe(run / "stages" / "01-grpo-group8" / "recipe.yaml").to_dict()))
    third = load_recipe(run / "stages" / "02-ppo" / "recipe.yaml")
    assert second["model"]["policy"] == str(run / "stages" / "00-grpo-group4" / "final")
    assert third.model.policy == str(run / "stages" / "01-grpo-group8" / "final")


def test_metrics_show_each_boundary_on_one_axis(staged_run: Path) -> None:
    table = rows(staged_run / "run")
    assert [row["stage"] for row in table] == [0] * 4 + [1] * 4 + [2] * 4
    assert [row["step"] for row in table] == list(range(1, 13))
    assert [row["samples"] for row in table] == [16 * step for step in range(1, 13)]
    assert {row["group_size"] for row in table if row["stage"] == 0} == {4}
    assert {row["group_size"] for row in table if row["stage"] == 1} == {8}
    ppo_rows = [row for row in table if row["stage"] == 2]
    assert all("value/explained_variance" in row and "group_size" not in row for row in ppo_rows)
    assert not any("value/explained_variance" in row for row in table[:8])
    # The clip-range schedule counts samples from the run's start: PPO's stage begins at 128.
    cliprange = [row["schedule/ppo.cliprange"] for row in ppo_rows]
    assert cliprange == pytest.approx([0.2, 0.225, 0.25, 0.275])
    assert not any("schedule/ppo.cliprange" in row for row in table[:8])


def test_a_restart_skips_finished_stages_and_resumes_the_interrupted_one(staged_run: Path) -> None:
    run = staged_run / "run"
    crashed = staged_run / "crashed"
    shutil.copytree(run, crashed)
    # As if the PPO stage had died after its update 3: its checkpoint at update 2 is the last complete one.
    ppo_stage = crashed / "stages" / "02-ppo"
    for path in (ppo_stage / "run_summary.json", crashed / "run_summary.json"):
        path.unlink()
    shutil.rmtree(ppo_stage / "checkpoint-64")
    shutil.rmtree(crashed / "final")
    text = (staged_run / "recipe_in.yaml").read_text().replace(str(run), str(crashed))
    recipe = staged_run / "recipe_crashed.yaml"
    recipe.write_text(text)
    before = {
        p: p.stat().st_mtime_ns for p in (crashed / "stages" / "00-grpo-group4").rglob("*") if p.is_file()
    }
    train_staged(recipe)
    summary = json.loads((crashed / "run_summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["resumed_from"] == str(ppo_stage / "checkpoint-32")
    table = rows(crashed)
    assert [row["step"] for row in table] == list(range(1, 13))
    assert [row["stage"] for row in table] == [0] * 4 + [1] * 4 + [2] * 4
    # Finished stages were not trained again.
    after = {p: p.stat().st_mtime_ns for p in before}
    assert after == before
    assert (crashed / "final" / "model.safetensors").exists()


# ----------------------------------------------------------------------------------------------------
# Invalid combinations, rejected before anything runs
# ----------------------------------------------------------------------------------------------------

STAGE_ERRORS = {
    "no budget": ("stages=[{name: a}]", "stages[0] (a): give one budget"),
    "two budgets": ("stages=[{name: a, max_steps: 2, total_samples: 64}]", "give one budget"),
    "model in a stage": (
        "stages=[{name: a, max_steps: 2, overrides: {model: {policy: other}}}]",
        "stages[0] (a).overrides.model: cannot change in a stage",
    ),
    "budget in overrides": (
        "stages=[{name: a, max_steps: 2, overrides: {training: {total_samples: 64}}}]",
        "overrides.training.total_samples",
    ),
    "same name twice": ("stages=[{name: a, max_steps: 2}, {name: a, max_steps: 2}]", "'a' is used twice"),
    "bad stage recipe": (
        "stages=[{name: a, max_steps: 2}, {name: b, max_steps: 2, overrides: {grpo: {num_generations: 5}}}]",
        "stages[1] (b): grpo.num_generations",
    ),
    "group normalisation for ppo": (
        "stages=[{name: a, max_steps: 2, overrides: {algorithm: ppo, advantages: {normalize: group}}}]",
        "advantages.normalize: 'group' does not apply to ppo.advantage_estimator 'gae'",
    ),
    "unknown schedule key": (
        "schedules={ppo.clip_range: {kind: constant, value: 0.1}}",
        "schedules.ppo.clip_range: not a setting that can follow a schedule (did you mean 'ppo.cliprange'?)",
    ),
    "scheduled and set": (
        "schedules={grpo.epsilon: {kind: constant, value: 0.1}}",
        "grpo.epsilon is also set as a value",
    ),
    "beta from zero": (
        "schedules={grpo.beta: {kind: linear, start: 0.0, end: 0.1, samples: 100}}",
        "schedules.grpo.beta: must start above 0",
    ),
    "bad schedule kind": ("schedules={grpo.beta: {kind: exponential, start: 0.1}}", "schedules.grpo.beta"),
    "normalise twice": ("advantages.normalize=none", "advantages.normalize and grpo.scale_rewards both set"),
}


@pytest.mark.parametrize("case", sorted(STAGE_ERRORS))
def test_invalid_combinations_are_rejected_with_the_key(case: str) -> None:
    override, message = STAGE_ERRORS[case]
    extra = {"scheduled and set": ["grpo.epsilon=0.2"], "normalise twice": ["grpo.scale_rewards=batch"]}
    with pytest.raises(RecipeError) as raised:
        load_recipe(None, [override, *extra.get(case, [])])
    assert message in str(raised.value)


def test_validate_rejects_a_bad_stage_with_exit_code_2(tmp_path: Path) -> None:
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(f"extends: {STAGED}\nstages:\n  - {{name: a}}\n")
    result = run_entry([LLM_RL, "validate", str(recipe)], launcher=[])
    assert result.returncode == 2
    assert "stages[0] (a): give one budget" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_embedded_staged_recipe_validates() -> None:
    recipe = load_recipe(STAGED)
    assert [stage.name for stage in recipe.stages] == ["grpo-group4", "grpo-group8", "ppo"]
    result = run_entry([LLM_RL, "validate", str(STAGED)], launcher=[])
    assert result.returncode == 0, result.stderr[-2000:]
    assert "02 ppo" in result.stdout and "PPO   200 updates x 64 samples = 12800 samples" in result.stdout
