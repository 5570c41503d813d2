"""PPO under DeepSpeed in two real processes on CPU (ZeRO-2 and ZeRO-3 on DeepSpeed's CPU accelerator).

Each launch takes 10-20 s: the runs are a handful of updates of the embedded recipe.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from llm_rl.algorithms.ppo.critic import load_value_model
from llm_rl.models.load import resolve_model_path
from llm_rl.models.tiny import build_tokenizer
from llm_rl.recipe.load import load_recipe
from tests.conftest import ACCELERATE_LAUNCH, REPO, run_entry

# Also run at the lowest versions pyproject.toml admits (`make test-floors`).
pytestmark = pytest.mark.floors

ZERO2 = str(REPO / "accelerate_configs" / "cpu_zero2_2proc.yaml")
ZERO3 = str(REPO / "accelerate_configs" / "cpu_zero3_2proc.yaml")


def launch_ppo(config: str, output: Path, *overrides: str) -> None:
    """`accelerate launch --config_file CONFIG recipes/ppo.py` on the embedded recipe, 8 episodes a process."""
    args = ["--config_file", config, "recipes/ppo.py", "--set", f"run.output_dir={output}"]
    for override in ("training.per_device_batch_size=8", "monitoring.wandb.mode=disabled", *overrides):
        args += ["--set", override]
    result = run_entry(args, launcher=ACCELERATE_LAUNCH)
    assert result.returncode == 0, result.stderr[-3000:]


def read_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def squared_change(before: dict, after: dict) -> float:
    assert before.keys() == after.keys()
    return sum(float(((after[key] - before[key].float()) ** 2).sum()) for key in before)


def test_zero2_clips_policy_and_critic_together_at_the_recipe_limit(tmp_path: Path) -> None:
    """One SGD step at learning rate 1 moves the weights by exactly the clipped gradient."""
    limit = 1e-3
    launch_ppo(
        ZERO2, tmp_path / "run",
        "training.max_steps=1", "ppo.num_ppo_epochs=1", "ppo.optim=sgd",
        "training.learning_rate=1.0", "ppo.critic_learning_rate=1.0", "training.lr_scheduler=constant",
        "training.warmup_ratio=0", "training.weight_decay=0", f"training.max_grad_norm={limit}",
    )  # fmt: skip
    run = tmp_path / "run"
    (row,) = read_rows(run)
    assert row["grad_norm"] > 100 * limit, "the test needs gradients far larger than the limit"
    assert "value/grad_norm" not in row, "DeepSpeed clips one joint norm"
    recipe = load_recipe(run / "recipe.yaml", [])
    policy_path = str(resolve_model_path(recipe.model.policy))
    policy_before = AutoModelForCausalLM.from_pretrained(policy_path).state_dict()
    critic_before = load_value_model(recipe, policy_path, build_tokenizer()).state_dict()
    moved = squared_change(policy_before, load_file(run / "final" / "model.safetensors"))
    moved += squared_change(critic_before, load_file(run / "final" / "value_model" / "model.safetensors"))
    # Unclipped, the step would be grad_norm long; accelerate's default clipping would allow 1.0.
    assert math.sqrt(moved) == pytest.approx(limit, rel=1e-2)


def test_zero2_resume_continues_exactly(tmp_path: Path) -> None:
    """4 updates straight, and 2 then resumed to 4, log the same rewards, losses and grad norms."""
    common = ["checkpointing.every=2", "checkpointing.unit=steps", "training.lr_scheduler=constant"]
    launch_ppo(ZERO2, tmp_path / "straight", "training.max_steps=4", *common)
    launch_ppo(ZERO2, tmp_path / "resumed", "training.max_steps=2", *common)
    checkpoint = tmp_path / "resumed" / "checkpoint-32"
    for part in ("rng_state_0.pth", "rng_state_1.pth", "scheduler.pt", "value_model/model.safetensors"):
        assert (checkpoint / part).exists(), part
    assert list(checkpoint.glob("global_step*/*optim_states.pt")), "DeepSpeed's optimizer shards"
    launch_ppo(ZERO2, tmp_path / "resumed", "training.max_steps=4", *common)
    summary = json.loads((tmp_path / "resumed" / "run_summary.json").read_text())
    assert Path(summary["resumed_from"]).name == "checkpoint-32"
    keys = ("step", "samples", "reward/mean", "loss/policy", "loss/value", "grad_norm")
    straight, resumed = read_rows(tmp_path / "straight"), read_rows(tmp_path / "resumed")
    assert [row["step"] for row in resumed] == [1, 2, 3, 4]
    for a, b in zip(straight, resumed, strict=True):
        assert [a[k] for k in keys] == pytest.approx([b[k] for k in keys], rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("estimator", ["gae", "reinforce_pp_baseline"])
def test_zero3_gathers_whole_weights_for_final(tmp_path: Path, estimator: str) -> None:
    """With a critic and without: a critic-free estimator's engine holds the policy alone."""
    groups = [] if estimator == "gae" else ["ppo.num_generations=4"]
    launch_ppo(
        ZERO3, tmp_path / "run", "training.max_steps=2", f"ppo.advantage_estimator={estimator}", *groups
    )
    run = tmp_path / "run"
    assert [row["samples"] for row in read_rows(run)] == [16, 32]
    norms = [row["grad_norm"] for row in read_rows(run)]
    # A group whose completions all scored alike gives no gradient; with 2 groups a process a whole update
    # can (seen: step 1, every completion at reward 0.1). The critic's loss always has one.
    assert all(norm > 0 for norm in norms) if estimator == "gae" else any(norm > 0 for norm in norms)
    recipe = load_recipe(run / "recipe.yaml", [])
    before = AutoModelForCausalLM.from_pretrained(str(resolve_model_path(recipe.model.policy))).state_dict()
    after = AutoModelForCausalLM.from_pretrained(run / "final").state_dict()
    for key, value in before.items():
        assert after[key].shape == value.shape, key
    assert squared_change(before, after) > 0, "the policy trained"
    if estimator == "gae":
        assert load_file(run / "final" / "value_model" / "model.safetensors")
    else:
        assert not (run / "final" / "value_model").exists()
        assert all("loss/value" not in row for row in read_rows(run))
