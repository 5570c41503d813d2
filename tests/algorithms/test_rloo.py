"""RLOO through TRL's RLOOTrainer: the recipe's `rloo:` section, a run of the embedded default through
`recipes/rloo.py`, and what plan, doctor, compare and migrate make of it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from transformers import LlamaConfig

from llm_rl.algorithms.rloo import RLOO
from llm_rl.cli import main
from llm_rl.errors import RecipeError
from llm_rl.recipe.load import load_recipe, validate_recipe
from llm_rl.recipe.migration import migrate
from llm_rl.tools.doctor import diagnose
from llm_rl.tools.plan import plan
from tests.conftest import REPO, run_entry

ARITHMETIC = REPO / "recipes" / "arithmetic"
LLM_RL = str(Path(sys.executable).parent / "llm-rl")
# The unified keys every row of a group algorithm carries (DESIGN.md, metrics.jsonl).
ROW_KEYS = {
    "step", "samples", "reward/mean", "reward/std", "rewards/accuracy/mean", "rewards/format/mean",
    "grad_norm", "loss/policy", "learning_rate", "completion_length/mean", "samples_per_second",
    "peak_memory_mb", "reward/group_std", "reward/frac_zero_std", "group_size",
}  # fmt: skip


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def rloo_recipe(*overrides: str):
    return load_recipe(ARITHMETIC / "rloo.yaml", list(overrides))


# --------------------------------------------------------------------------------------------------
# The recipe
# --------------------------------------------------------------------------------------------------


def test_rloo_section_and_shared_sections_reach_the_trl_config() -> None:
    config = RLOO.trainer_config(rloo_recipe("rloo.epsilon=0.3", "generation.temperature=0.7"))
    assert (config.num_generations, config.beta, config.epsilon) == (8, 0.0, 0.3)
    assert (config.max_completion_length, config.temperature) == (3, 0.7)
    assert config.reward_weights == [1.0, 0.1]
    assert config.per_device_train_batch_size == 64 and config.learning_rate == 1e-4
    # TRL's own default: leave-one-out advantages, not divided by anything.
    assert config.normalize_advantages is False
    assert RLOO.trainer_config(rloo_recipe("advantages.normalize=batch")).normalize_advantages is True
    assert RLOO.samples_per_step(rloo_recipe()) == 64
    assert RLOO.samples_per_step(rloo_recipe("rloo.num_iterations=2")) == 32


def test_generation_backend_and_rollout_batch_reach_the_trl_config() -> None:
    """RLOO shares GRPO's mapping: static is TRL's static cache, paged its continuous batching, and the
    rollout batch TRL's generation batch (in whole micro-batches)."""
    static = RLOO.trainer_config(rloo_recipe("generation.backend=static", "generation.batch_size=128"))
    assert (static.cache_implementation, static.use_transformers_continuous_batching) == ("static", False)
    assert (static.generation_batch_size, static.steps_per_generation) == (128, 2)
    paged = RLOO.trainer_config(rloo_recipe("generation.backend=paged"))
    assert (paged.cache_implementation, paged.use_transformers_continuous_batching) == (None, True)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("rloo.loss_type=dapo", "rloo.loss_type: not a field of TRL's RLOOConfig"),
        (
            "rloo.learning_rate=0.1",
            "rloo.learning_rate: set by the shared section; use training.learning_rate",
        ),
        ("rloo.num_generations=3", "rloo.num_generations: the generation batch of 64 completions"),
        ("rloo.num_generations=1", "rloo.num_generations: must be an integer of at least 2"),
        ("advantages.normalize=group", "advantages.normalize: 'group' divides by each group's reward spread"),
        ("schedules={rloo.beta: {kind: constant, value: 0.0}}", "schedules.rloo.beta: must start above 0"),
        (
            "schedules={rloo.epsilon: {kind: constant, value: 0.1}}",
            "schedules.rloo.epsilon: rloo.epsilon is also",
        ),
        ("rlooo={beta: 0.1}", "rlooo: unknown key (did you mean 'rloo'?)"),
    ],
)
def test_bad_rloo_settings_name_the_key(override: str, message: str) -> None:
    extra = ["rloo.epsilon=0.2"] if "epsilon" in override else []
    with pytest.raises(RecipeError) as caught:
        rloo_recipe(override, *extra)
    assert message in str(caught.value)


# --------------------------------------------------------------------------------------------------
# A run of the embedded default
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded default, 4 small updates, through `recipes/rloo.py` with no recipe file."""
    output = tmp_path_factory.mktemp("rloo") / "run"
    overrides = [
        "training.max_steps=4", f"run.output_dir={output}", "checkpointing.every=2", "checkpointing.unit=steps",
        "training.per_device_batch_size=16", "rloo.num_generations=4", "monitoring.wandb.mode=offline",
    ]  # fmt: skip
    result = run_entry(["recipes/rloo.py", *[arg for o in overrides for arg in ("--set", o)]])
    assert result.returncode == 0, result.stderr[-3000:]
    return output


def test_the_demo_writes_the_run_folder_with_the_unified_metrics(demo_run: Path) -> None:
    summary = json.loads((demo_run / "run_summary.json").read_text())
    assert (summary["status"], summary["algorithm"], summary["steps"], summary["samples"]) == (
        "completed", "rloo", 4, 64,
    )  # fmt: skip
    rows = read_jsonl(demo_run / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    assert [row["samples"] for row in rows] == [16, 32, 48, 64]
    for row in rows:
        assert row.keys() >= ROW_KEYS, ROW_KEYS - row.keys()
        assert row["group_size"] == 4
    assert sorted(path.name for path in demo_run.glob("checkpoint-*")) == ["checkpoint-32", "checkpoint-64"]
    recipe = yaml.safe_load((demo_run / "recipe.yaml").read_text())
    assert recipe["algorithm"] == "rloo" and recipe["rloo"] == {"num_generations": 4, "beta": 0.0}
    assert (demo_run / "final" / "model.safetensors").is_file()


def test_compare_puts_an_rloo_run_beside_a_grpo_run(demo_run: Path, tmp_path: Path, capsys) -> None:
    grpo = tmp_path / "grpo"
    grpo.mkdir()
    rows = read_jsonl(demo_run / "metrics.jsonl")
    (grpo / "metrics.jsonl").write_text(
        "".join(json.dumps({**row, "reward/mean": 0.0}) + "\n" for row in rows)
    )
    (grpo / "run_summary.json").write_text(json.dumps({"algorithm": "grpo", "status": "completed"}))
    assert main(["compare", str(grpo), str(demo_run), "-o", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr().out
    assert "| algorithm" in printed and "rloo" in printed and "grpo" in printed
    assert (tmp_path / "report" / "report.md").is_file()


# --------------------------------------------------------------------------------------------------
# plan, doctor, migrate
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def config_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("config-only")
    LlamaConfig(
        vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128
    ).save_pretrained(folder)
    return folder


def test_plan_holds_a_reference_model_only_when_beta_is_above_0(config_only: Path) -> None:
    shape = [f"model.policy={config_only}", "training.per_device_batch_size=8", "rloo.num_generations=4"]
    without = plan(rloo_recipe(*shape), gpus=1, gpu_memory=80)
    assert [m.name for m in without.trainable] == ["policy"] and without.frozen == []
    with_kl = plan(rloo_recipe(*shape, "rloo.beta=0.05"), gpus=1, gpu_memory=80)
    assert [m.name for m in with_kl.frozen] == ["reference"]
    assert with_kl.algorithm == "rloo"


def test_doctor_names_rloos_own_kl_weight(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    rows = [
        {"step": step, "samples": 64 * step, "reward/mean": 0.2 + 0.006 * step, "reward/std": 0.3,
         "kl": 0.02 + 2.0 * (step / 100) ** 2}
        for step in range(1, 101)
    ]  # fmt: skip
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "recipe.yaml").write_text(yaml.safe_dump({"algorithm": "rloo"}))
    findings, _ = diagnose(folder)
    (kl,) = [f for f in findings if f.name == "KL drifting up"]
    assert "raise rloo.beta" in kl.advice


def test_migrate_grpo_to_rloo_keeps_the_group_settings() -> None:
    migration = migrate(ARITHMETIC / "grpo.yaml", "rloo")
    assert migration.recipe["algorithm"] == "rloo"
    assert migration.recipe["rloo"] == {"num_generations": 8, "beta": 0.0}
    assert "grpo" not in migration.recipe
    assert migration.recipe["run"]["output_dir"] == "runs/rloo-arithmetic"
    assert migration.warnings == []
    validate_recipe(migration.recipe, "migrated")


def test_migrate_ppo_to_rloo_maps_the_shared_settings_and_picks_a_group() -> None:
    migration = migrate(ARITHMETIC / "ppo.yaml", "rloo")
    section = migration.recipe["rloo"]
    # kl_coef -> beta, num_ppo_epochs -> num_iterations; PPO's default cliprange (0.2) -> epsilon.
    assert section == {"beta": 0.0, "num_iterations": 2, "epsilon": 0.2, "num_generations": 8}
    warned = {row.source: row.note for row in migration.warnings}
    assert warned["ppo.value_model"].startswith("no RLOO counterpart: RLOO has no critic")
    assert "ppo.critic_learning_rate" in warned and "ppo.num_mini_batches" in warned
    added = [row for row in migration.rows if row.source == "(added)"]
    assert [(row.target, row.value) for row in added] == [("rloo.num_generations", 8)]
    validate_recipe(migration.recipe, "migrated")


def test_migrate_rejects_an_unknown_target_with_exit_2(tmp_path: Path) -> None:
    result = run_entry(
        ["migrate", str(ARITHMETIC / "grpo.yaml"), "--to", "dpo", "-o", str(tmp_path / "x.yaml")],
        launcher=[LLM_RL],
    )
    assert result.returncode == 2
    assert "--to: input should be 'grpo', 'ppo' or 'rloo', got 'dpo'" in result.stderr
    assert not (tmp_path / "x.yaml").exists()
