"""A TRL group trainer is one declaration: registering a further one needs nothing else.

The fake algorithm here is Dr. GRPO (Liu et al. 2025) as its own algorithm: TRL's GRPOTrainer with
unscaled group advantages. It is registered for the test alone; the whole path a recipe takes (checks,
validate, a run, its metrics and summary, migrate from GRPO) works for it unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trl import GRPOConfig

from llm_rl.algorithms.base import Idea
from llm_rl.algorithms.registry import ALGORITHMS
from llm_rl.algorithms.trl_groups.declaration import GroupTrainer
from llm_rl.errors import RecipeError
from llm_rl.recipe.load import load_recipe
from llm_rl.recipe.migration import migrate
from llm_rl.run.training import train
from llm_rl.tools.validate import describe_run
from tests.conftest import ARITHMETIC

DR_GRPO = GroupTrainer(
    NAME="dr_grpo",
    config_class=GRPOConfig,
    kl_meaning="Dr. GRPO's beta weighs a KL loss term",
    advantage_key="scale_rewards",
    advantage_values={"none": "none"},
    lacks={Idea.CRITIC: "Dr. GRPO has no critic"},
)


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> GroupTrainer:
    monkeypatch.setitem(ALGORITHMS, DR_GRPO.NAME, DR_GRPO)
    return DR_GRPO


def dr_grpo_recipe(output: Path, *overrides: str):
    return load_recipe(
        ARITHMETIC / "grpo.yaml",
        [
            "algorithm=dr_grpo",
            f"run.output_dir={output}",
            "training.max_steps=2",
            "training.per_device_batch_size=16",
            "monitoring.wandb.mode=disabled",
            "monitoring.progress=false",
            "dr_grpo.num_generations=4",
            "dr_grpo.loss_type=dr_grpo",
            *overrides,
        ],
    )


def test_a_registered_declaration_trains_with_the_unified_metrics(registered, tmp_path: Path) -> None:
    recipe = dr_grpo_recipe(tmp_path / "run")
    assert describe_run(recipe).startswith("recipe OK: DR_GRPO run")
    summary = train(recipe)
    assert summary["status"] == "completed" and summary["algorithm"] == "dr_grpo"
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    training_rows = [row for row in rows if "loss/policy" in row]
    assert len(training_rows) == 2
    assert all({"reward/mean", "reward/group_std", "group_size"} <= row.keys() for row in training_rows)
    assert (tmp_path / "run" / "final" / "model.safetensors").exists()


def test_a_registered_declaration_checks_its_own_keys(registered, tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="dr_grpo.num_generation: not a field of TRL's GRPOConfig"):
        dr_grpo_recipe(tmp_path, "dr_grpo.num_generation=4")
    with pytest.raises(RecipeError, match="'group' divides by each group's reward spread, which DR_GRPO"):
        dr_grpo_recipe(tmp_path, "advantages.normalize=group")


def test_migrate_converts_a_grpo_recipe_to_a_registered_declaration(registered) -> None:
    migration = migrate(ARITHMETIC / "grpo.yaml", "dr_grpo")
    section = migration.recipe["dr_grpo"]
    assert migration.recipe["algorithm"] == "dr_grpo" and "grpo" not in migration.recipe
    assert section["num_generations"] == 8
    assert any(row.target == "dr_grpo.beta" for row in migration.rows)


def test_migrate_finds_counterparts_from_each_sides_own_keys(registered) -> None:
    """No algorithm lists another's keys: PPO's keys meet the declaration's by the idea they set."""
    migration = migrate(ARITHMETIC / "ppo.yaml", "dr_grpo")
    warned = {row.source: row.note for row in migration.warnings}
    assert warned["ppo.value_model"] == "no DR_GRPO counterpart: Dr. GRPO has no critic"
    assert warned["ppo.num_mini_batches"] == "no DR_GRPO counterpart; nearest: dr_grpo.steps_per_generation"
    back = migrate(ARITHMETIC / "grpo.yaml", "ppo", overrides=["ppo.advantage_estimator=group"])
    assert back.recipe["ppo"]["num_generations"] == 8  # a group estimator has groups: kept, not warned


def test_each_declaration_builds_the_trainer_trl_pairs_with_its_config() -> None:
    import trl

    from llm_rl.algorithms.grpo import GRPO
    from llm_rl.algorithms.rloo import RLOO

    for declaration, trainer in (
        (GRPO, trl.GRPOTrainer),
        (RLOO, trl.RLOOTrainer),
        (DR_GRPO, trl.GRPOTrainer),
    ):
        assert getattr(trl, declaration.trainer_name) is trainer
