"""The recipe schema and loader: bad recipes and their messages, extends, --set, TRL field pass-through."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llm_rl.errors import RecipeError
from llm_rl.recipe.load import load_recipe
from tests.conftest import REPO, write

BAD_RECIPES = [
    ({"trainig": {}}, "trainig: unknown key"),
    (
        {"training": {"learning_rat": 0.1}},
        "training.learning_rat: unknown key (did you mean 'learning_rate'?)",
    ),
    ({"training": {"learning_rate": "fast"}}, "training.learning_rate: input should be a valid number"),
    ({"training": {"max_steps": 0}}, "training.max_steps: input should be greater than 0"),
    ({"training": {"max_steps": 1.5}}, "training.max_steps: input should be a valid integer"),
    ({"algorithm": "dpo"}, "algorithm: input should be 'grpo', 'ppo' or 'rloo'"),
    (
        {"generation": {"max_new_tokens": 8, "min_new_tokens": 9}},
        "generation.min_new_tokens (9) is above generation.max_new_tokens (8)",
    ),
    ({"rewards": []}, "rewards: value error, at least one reward function is needed"),
    ({"rewards": [{"weight": 1.0}]}, "rewards[0].name: field required"),
    (
        {"rewards": [{"name": "accuracy", "weight": "high"}]},
        "rewards[0].weight: input should be a valid number",
    ),
    ({"checkpointing": {"unit": "epochs"}}, "checkpointing.unit: input should be 'samples' or 'steps'"),
    ({"monitoring": {"wandb": {"mode": "on"}}}, "monitoring.wandb.mode: input should be"),
    ({"early_stopping": {"patience": 0}}, "early_stopping.patience: input should be greater than 0"),
    ({"model": {"lora": {"rank": 8}}}, "model.lora.rank: unknown key (did you mean 'r'?)"),
    ({"training": {"max_steps": 5, "total_samples": 100}}, "give one budget"),
    (
        {"grpo": {"num_generaions": 4}},
        "grpo.num_generaions: not a field of TRL's GRPOConfig (did you mean 'num_generations'?)",
    ),
    (
        {"grpo": {"learning_rate": 0.1}},
        "grpo.learning_rate: set by the shared section; use training.learning_rate",
    ),
    (
        {"ppo": {"kl_coeff": 0.1}},
        "ppo.kl_coeff: not a PPO key (TRL's PPOConfig names, llm_rl's own, or TrainingArguments fields) (did you mean 'kl_coef'?)",
    ),
    ({"ppo": {"kl_estimator": "k2"}}, "ppo.kl_estimator: input should be 'k1' or 'k3'"),
    (
        {"ppo": {"reward_model_path": "/rm"}},
        "ppo.reward_model_path: not used by llm_rl's PPO: a reward model is a reward",
    ),
    (
        {"ppo": {"batch_size": 64}},
        "ppo.batch_size: not used by llm_rl's PPO: computed from training.per_device_batch_size",
    ),
    ({"ppo": {"num_sample_generations": 10}}, "ppo.num_sample_generations: input should be 0"),
    (
        {"training": {"per_device_batch_size": 6}, "grpo": {"num_generations": 4}},
        "is not a multiple of the group size 4",
    ),
    ({"grpo": {"num_generations": 1}}, "grpo.num_generations: must be an integer of at least 2"),
    (
        {"rewards": [{"name": "accuracy"}, {"name": "accuracy"}]},
        "rewards: 'accuracy' appears twice; give one of them an alias",
    ),
    (
        {"checkpointing": {"resume": "/no/such/checkpoint"}},
        "checkpointing.resume: '/no/such/checkpoint' is neither",
    ),
    ({"data": {"sources": []}}, "data.sources: give at least one dataset, or use data.source"),
    (
        {"data": {"source": "a.jsonl", "sources": [{"source": "b.jsonl"}]}},
        "data.sources and data.source both set",
    ),
    (
        {"data": {"sources": [{"source": "a.jsonl", "weight": 0.5}, {"source": "b.jsonl"}]}},
        "data.sources[1].weight: set a weight on every source or on none",
    ),
    (
        {"data": {"sources": [{"source": "a.jsonl"}], "eval_split": "test"}},
        "for a mixture hold prompts out with data.eval_size",
    ),
    ({"data": {"eval_split": "test", "eval_size": 10}}, "data.eval_split and data.eval_size both set"),
    ({"data": {"eval_size": 1.5}}, "data.eval_size: 1.5 is neither a fraction below 1"),
    ({"data": {"sources": [{"split": "train"}]}}, "data.sources[0].source: field required"),
    (
        {"algorithm": "ppo", "ppo": {"use_liger_kernel": True}},
        "ppo.use_liger_kernel: liger-kernel is not installed here; install it or set ppo.use_liger_kernel: false",
    ),
    (
        {"grpo": {"use_vllm": True}},
        "grpo.use_vllm: set by the shared section; use generation.backend instead",
    ),
    (
        {"rloo": {"vllm_gpu_memory_utilization": 0.5}},
        "rloo.vllm_gpu_memory_utilization: set by the shared section; use generation.vllm.gpu_memory_utilization",
    ),
    (
        {"generation": {"vllm": {"sleep_mode": True}}},
        "generation.vllm.sleep_mode is set but generation.backend is 'auto'",
    ),
    (
        {"algorithm": "ppo", "generation": {"backend": "vllm", "vllm": {"mode": "server"}}},
        "generation.vllm.mode: PPO runs its vLLM engine inside each training process",
    ),
    (
        {"algorithm": "rloo", "generation": {"backend": "vllm", "vllm": {"importance_sampling": True}}},
        "generation.vllm.importance_sampling: TRL's RLOOConfig has no importance-sampling correction",
    ),
    # Non-finite numbers (issue 22): a NaN weight would make every reward NaN and train on.
    (
        {"rewards": [{"name": "accuracy", "weight": float("nan")}]},
        "rewards[0].weight: nan is not a finite number",
    ),
    ({"training": {"learning_rate": float("inf")}}, "training.learning_rate: inf is not a finite number"),
    ({"grpo": {"beta": float("-inf")}}, "grpo.beta: -inf is not a finite number"),
    (
        {"schedules": {"ppo.kl_coef": {"kind": "linear", "start": 0.1, "end": float("nan"), "samples": 10}}},
        "schedules.ppo.kl_coef.end: nan is not a finite number",
    ),
    (
        {"monitoring": {"alerts": {"kl": {"action": "stop"}}}},
        "monitoring.alerts.kl: value error, give the bound `above` for action 'stop', or set action: off",
    ),
    (
        {"early_stopping": {"enabled": True, "metric": "eval/reward/mean"}},
        "early_stopping.metric 'eval/reward/mean' is an eval metric, but evaluation.every is not set",
    ),
]


@pytest.mark.parametrize(("recipe", "message"), BAD_RECIPES, ids=[m[:40] for _, m in BAD_RECIPES])
def test_bad_recipe_names_file_and_key(tmp_path: Path, recipe: dict, message: str) -> None:
    path = write(tmp_path / "bad.yaml", recipe)
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: ") or text.startswith(f"{path.resolve()}: ")
    assert message in text


def test_not_yaml_and_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_recipe(write(tmp_path / "a.yaml", "training: [unclosed"))
    with pytest.raises(RecipeError, match="a recipe must be a mapping"):
        load_recipe(write(tmp_path / "b.yaml", "- a\n- b\n"))
    with pytest.raises(RecipeError, match="recipe file not found"):
        load_recipe(tmp_path / "missing.yaml")


def test_extends_deep_merges_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    write(
        tmp_path / "base" / "base.yaml",
        {
            "training": {"learning_rate": 0.01, "max_steps": 7},
            "rewards": [{"name": "accuracy"}, {"name": "format"}],
        },
    )
    path = write(
        tmp_path / "top.yaml",
        {"extends": "base/base.yaml", "algorithm": "ppo", "training": {"learning_rate": 0.5}},
    )
    recipe = load_recipe(path)
    assert recipe.algorithm == "ppo"
    assert recipe.training.learning_rate == 0.5
    assert recipe.training.max_steps == 7
    assert [r.name for r in recipe.rewards] == ["accuracy", "format"]


def test_extends_chain_and_cycle(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", {"run": {"seed": 1}})
    write(tmp_path / "b.yaml", {"extends": "a.yaml", "training": {"max_steps": 3}})
    recipe = load_recipe(write(tmp_path / "c.yaml", {"extends": "b.yaml"}))
    assert (recipe.run.seed, recipe.training.max_steps) == (1, 3)
    write(tmp_path / "x.yaml", {"extends": "y.yaml"})
    write(tmp_path / "y.yaml", {"extends": "x.yaml"})
    with pytest.raises(RecipeError, match="extends: cycle"):
        load_recipe(tmp_path / "x.yaml")


def test_set_overrides_parse_values_as_yaml(tmp_path: Path) -> None:
    path = write(tmp_path / "r.yaml", {"training": {"max_steps": 3}})
    recipe = load_recipe(
        path,
        [
            "training.max_steps=9",
            "training.learning_rate=3e-4",
            "generation.top_k=5",
            "run.name=try-1",
            "grpo.beta=0.04",
            "rewards=[{name: accuracy, mode: exact}]",
        ],
    )
    assert recipe.training.max_steps == 9
    assert recipe.training.learning_rate == pytest.approx(3e-4)
    assert recipe.generation.top_k == 5
    assert recipe.run.name == "try-1"
    assert recipe.grpo == {"beta": 0.04}
    assert recipe.rewards[0].kwargs == {"mode": "exact"}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("training.max_steps", "expected dotted.key=value"),
        ("training.max_steps=[1", "value is not valid YAML"),
        ("training.max_steps.deep=1", "'max_steps' is not a section"),
        ("training.max_stesp=1", "training.max_stesp: unknown key (did you mean 'max_steps'?)"),
    ],
)
def test_bad_overrides(tmp_path: Path, override: str, message: str) -> None:
    path = write(tmp_path / "r.yaml", {"training": {"max_steps": 3}})
    with pytest.raises(RecipeError, match=re.escape(message)):
        load_recipe(path, [override])


def test_trl_field_names_are_accepted(tmp_path: Path) -> None:
    path = write(
        tmp_path / "r.yaml",
        {
            "grpo": {
                "num_generations": 4,
                "beta": 0.04,
                "loss_type": "grpo",
                "epsilon": 0.3,
                "scale_rewards": "batch",
            },
            "ppo": {"kl_coef": 0.1, "cliprange": 0.1, "num_ppo_epochs": 2, "value_model": "policy"},
            "training": {"per_device_batch_size": 8},
        },
    )
    recipe = load_recipe(path)
    assert recipe.grpo["loss_type"] == "grpo"
    assert recipe.ppo["num_ppo_epochs"] == 2


def test_shipped_recipes_load() -> None:
    for path in sorted((REPO / "recipes").rglob("*.yaml")):
        recipe = load_recipe(path)
        assert recipe.rewards, path


def test_defaults_follow_the_contract() -> None:
    recipe = load_recipe(None)
    assert recipe.checkpointing.every == 100_000
    assert recipe.checkpointing.unit == "samples"
    assert recipe.checkpointing.resume == "auto"
    assert recipe.early_stopping.patience == 5
    assert recipe.model.trust_remote_code is False
    assert recipe.monitoring.wandb.mode == "auto"


@pytest.mark.parametrize(
    ("text", "message"),
    [("1: foo\n", "[1]: keys should be strings"), ("grpo: {1: x}\n", "grpo[1]: keys should be strings")],
)
def test_keys_that_are_not_strings_are_bad_input(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    assert str(caught.value).endswith(message)


def test_a_staged_ppo_recipe_is_checked_by_its_stages_budgets_not_its_own(tmp_path: Path) -> None:
    """The recipe's own 5 updates would end inside a 60-update warm-up; the one stage has 100."""
    path = tmp_path / "staged.yaml"
    path.write_text(
        "algorithm: ppo\ntraining: {max_steps: 5, per_device_batch_size: 8}\nppo: {critic_warmup_steps: 60}\n"
        "stages: [{name: long, max_steps: 100}]\n"
    )
    recipe = load_recipe(path, [f"run.output_dir={tmp_path / 'run'}"])
    assert recipe.stages[0].max_steps == 100
    path.write_text(path.read_text().replace("max_steps: 100", "max_steps: 50"))
    with pytest.raises(RecipeError, match="critic_warmup_steps"):
        load_recipe(path, [f"run.output_dir={tmp_path / 'run'}"])


# --------------------------------------------------------------------------------------------------
# Switched-off sections are not checked as if on (issue 22)
# --------------------------------------------------------------------------------------------------


def test_a_disabled_early_stop_on_an_eval_metric_needs_no_evaluation() -> None:
    recipe = load_recipe(
        REPO / "recipes" / "gsm8k" / "ppo.yaml", ["early_stopping.enabled=false", "evaluation.every=null"]
    )
    assert recipe.early_stopping.metric == "eval/reward/mean" and recipe.evaluation.every is None


def test_an_alert_switched_off_needs_no_bound(tmp_path: Path) -> None:
    # A bare YAML `off` is read as false; it means the action "off".
    path = tmp_path / "recipe.yaml"
    path.write_text("monitoring:\n  alerts:\n    kl: {action: off}\n    nonfinite: {action: off}\n")
    alerts = load_recipe(path).monitoring.alerts
    assert (alerts.kl.action, alerts.kl.above, alerts.nonfinite.action) == ("off", None, "off")
