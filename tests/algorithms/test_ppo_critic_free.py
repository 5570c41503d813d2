"""`ppo.advantage_estimator` on llm_rl's PPO loop: critic-free runs build, train, save and resume
without a value model; group estimators sample whole groups of one prompt; the recipe checks, the
warnings, `plan`, `doctor` and `migrate` follow the estimator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from llm_rl.algorithms.ppo import algorithm as ppo
from llm_rl.algorithms.ppo.settings import PPOSettings
from llm_rl.algorithms.ppo.update_metrics import group_metrics
from llm_rl.errors import RecipeError
from llm_rl.monitoring.metrics import first_and_last_mean
from tests.algorithms.test_ppo import (
    assert_same_rows_after_resume,
    build_ppo_trainer,
    small_ppo_recipe,
    straight_and_resumed,
)
from tests.conftest import ACCELERATE_LAUNCH, LLM_RL, REPO, rows, run_entry

CRITIC_FREE = ["reinforce_pp", "reinforce_pp_baseline", "group", "leave_one_out"]
VALUE_KEYS = {"loss/value", "value/explained_variance", "value/grad_norm", "value/clipfrac", "value/warmup"}
CPU_DDP = str(REPO / "accelerate_configs" / "cpu_ddp_2proc.yaml")


def critic_free_recipe(output: Path, estimator: str, *overrides: str):
    """The small embedded PPO recipe under `estimator`, 4 completions a prompt."""
    return small_ppo_recipe(
        output, f"ppo.advantage_estimator={estimator}", "ppo.num_generations=4", *overrides
    )


# --------------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("estimator", CRITIC_FREE)
def test_critic_free_runs_train_save_and_log_without_a_critic(tmp_path: Path, estimator: str) -> None:
    output = tmp_path / "run"
    result = run_entry(
        ["recipes/ppo.py",
         "--set", f"ppo.advantage_estimator={estimator}", "--set", "ppo.num_generations=4",
         "--set", "training.per_device_batch_size=16", "--set", "training.max_steps=2",
         "--set", "checkpointing.every=1", "--set", "checkpointing.unit=steps",
         "--set", f"run.output_dir={output}", "--set", "monitoring.wandb.mode=disabled"]
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    # The embedded recipe sets the critic's keys: kept, and named once as unused.
    assert "ppo.value_model, ppo.critic_learning_rate, ppo.critic_warmup_steps: not used" in result.stderr
    assert json.loads((output / "run_summary.json").read_text())["status"] == "completed"
    for folder in (output / "checkpoint-16", output / "checkpoint-32", output / "final"):
        assert (folder / "model.safetensors").exists(), folder
        assert not (folder / "value_model").exists(), folder
    logged = rows(output)
    assert [row["samples"] for row in logged] == [16, 32]
    for row in logged:
        assert not VALUE_KEYS & row.keys(), row
        assert {"loss/policy", "grad_norm", "policy/clipfrac", "reward/mean"} <= row.keys()
        # 4 completions a prompt, for every estimator: the groups' spread is logged, as GRPO logs it.
        assert {"reward/group_std", "reward/frac_zero_std"} <= row.keys()


def test_group_rollouts_hold_whole_groups_of_one_prompt_and_their_advantages(tmp_path: Path) -> None:
    trainer, _ = build_ppo_trainer(critic_free_recipe(tmp_path / "run", "leave_one_out"))
    assert trainer.model.critic is None
    assert [group["name"] for group in trainer.create_optimizer().param_groups] == ["policy", "policy"]
    trainer.train()
    batch = next(trainer.prompt_batches())
    assert batch["input_ids"].shape[0] == 4, "16 completions an update are 4 prompts"
    rollout = trainer.rollout(batch)
    assert rollout.size == 16 and rollout.values is None
    groups = rollout.row_indices.view(4, 4)
    assert (groups == groups[:, :1]).all(), "each prompt's 4 completions sit in consecutive rows"
    assert len(set(groups[:, 0].tolist())) == 4
    prompts = rollout.prompt_ids.view(4, 4, -1)
    assert (prompts == prompts[:, :1]).all()
    # kl_coef is 0 here: each completion's advantage is its score less the mean of its group's others, at
    # every one of its tokens.
    scores = rollout.scores.view(4, 4)
    expected = scores - (scores.sum(1, keepdim=True) - scores) / 3
    mask = rollout.response_mask
    per_token = torch.where(mask, rollout.advantages, torch.nan).view(4, 4, -1)
    assert torch.allclose(per_token.nanmean(-1), expected, atol=1e-6)
    assert (rollout.advantages[~mask] == 0).all()
    stats = trainer.optimise(rollout)
    assert "loss/value_avg" not in stats and "value/grad_norm" not in stats
    metrics = trainer.update_metrics(rollout, stats, warming_up=False)
    assert "val/explained_variance" not in metrics and "critic_warmup" not in metrics
    assert metrics["reward/group_std"] == pytest.approx(scores.std(1, unbiased=False).mean().item())


def test_reinforce_pp_advantages_are_the_whitened_returns_of_the_batch(tmp_path: Path) -> None:
    trainer, _ = build_ppo_trainer(critic_free_recipe(tmp_path / "run", "reinforce_pp", "ppo.kl_coef=0.1"))
    trainer.train()
    rollout = trainer.rollout(next(trainer.prompt_batches()))
    mask = rollout.response_mask
    advantages = rollout.advantages[mask]
    assert advantages.mean().item() == pytest.approx(0.0, abs=1e-5)
    assert advantages.std().item() == pytest.approx(1.0, abs=1e-3)
    # The returns are the score at the last token and -kl_coef x KL at each, summed from the end.
    tail = torch.flip(torch.cumsum(torch.flip(-0.1 * rollout.kl, [1]), 1), [1])
    expected = (tail + rollout.scores[:, None]).masked_fill(~mask, 0.0)
    assert torch.allclose(rollout.returns, expected, atol=1e-5)


def test_a_critic_free_run_resumes_exactly(tmp_path: Path) -> None:
    """4 updates straight, and 2 + 2 resumed from the checkpoint at 2, log the same rows."""
    straight, resumed = straight_and_resumed(
        tmp_path, lambda output, *overrides: critic_free_recipe(output, "group", *overrides)
    )
    assert not (tmp_path / "resumed" / "checkpoint-32" / "value_model").exists()
    assert_same_rows_after_resume(
        straight, resumed, ("objective/scores", "reward/group_std", "loss/policy_avg", "grad_norm")
    )


def test_a_group_estimator_runs_whole_groups_on_each_of_two_processes(tmp_path: Path) -> None:
    output = tmp_path / "run"
    result = run_entry(
        ["--config_file", CPU_DDP, "recipes/ppo.py",
         "--set", "ppo.advantage_estimator=reinforce_pp_baseline", "--set", "ppo.num_generations=4",
         "--set", "training.max_steps=2", "--set", "training.per_device_batch_size=16",
         "--set", f"run.output_dir={output}", "--set", "monitoring.wandb.mode=disabled"],
        launcher=ACCELERATE_LAUNCH,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    logged = rows(output)
    assert [row["samples"] for row in logged] == [32, 64]
    assert all(not VALUE_KEYS & row.keys() and "reward/group_std" in row for row in logged)
    assert not (output / "final" / "value_model").exists()


# --------------------------------------------------------------------------------------------------
# The recipe
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spelling", "name"),
    [("rloo", "leave_one_out"), ("GRPO", "group"), ("reinforce++", "reinforce_pp"), ("gae", "gae")],
)
def test_peer_spellings_are_read_as_the_registered_names(spelling: str, name: str) -> None:
    assert PPOSettings(advantage_estimator=spelling).advantage_estimator == name


def test_group_size_defaults_to_one_and_to_trl_s_eight_for_group_estimators() -> None:
    assert PPOSettings().group_size == 1
    assert PPOSettings(advantage_estimator="reinforce_pp").group_size == 1
    assert PPOSettings(advantage_estimator="group").group_size == 8
    assert PPOSettings(advantage_estimator="group", num_generations=4).group_size == 4
    assert PPOSettings(num_generations=2).needs_critic


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["ppo.advantage_estimator=vtrace"],
            "ppo.advantage_estimator: value error, unknown advantage estimator",
        ),
        (["ppo.advantage_estimator=group", "ppo.num_generations=1"], "needs at least 2 per prompt"),
        (["ppo.advantage_estimator=group", "ppo.num_generations=3"], "ppo.num_generations (3) must divide"),
        (["advantages.normalize=group"], "for GRPO's group normalisation set ppo.advantage_estimator: group"),
        (["ppo.advantage_estimator=leave_one_out", "advantages.normalize=batch"], "does not apply"),
    ],
)
def test_estimator_settings_that_cannot_run_are_refused(tmp_path: Path, overrides, message: str) -> None:
    with pytest.raises(RecipeError, match=None) as raised:
        small_ppo_recipe(tmp_path / "run", *overrides)
    assert message in str(raised.value)


def test_a_bad_estimator_exits_2_with_one_line_naming_the_key(tmp_path: Path) -> None:
    result = run_entry(
        [LLM_RL, "validate", str(REPO / "recipes" / "arithmetic" / "ppo.yaml"),
         "--set", "ppo.advantage_estimator=vtrace"]
    )  # fmt: skip
    assert result.returncode == 2
    assert "ppo.advantage_estimator" in result.stderr and "leave_one_out" in result.stderr
    assert "Traceback" not in result.stderr


def test_validate_names_the_estimator_and_the_unused_critic_keys() -> None:
    result = run_entry(
        [LLM_RL, "validate", str(REPO / "recipes" / "arithmetic" / "ppo.yaml"),
         "--set", "ppo.advantage_estimator=rloo", "--set", "ppo.num_generations=4"]
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "recipe OK: PPO run 'ppo-arithmetic' (leave_one_out advantages, no critic)" in result.stdout
    assert result.stderr.count("not used, as ppo.advantage_estimator 'leave_one_out' trains no critic") == 1


def test_unused_settings_are_named_for_critic_free_estimators_only(tmp_path: Path) -> None:
    gae = small_ppo_recipe(tmp_path / "a", "ppo.gamma=0.9")
    assert ppo.unused_settings(gae, ppo.ppo_settings(gae)) == []
    loo = small_ppo_recipe(
        tmp_path / "b",
        "ppo.advantage_estimator=leave_one_out",
        "ppo.num_generations=4",
        "ppo.gamma=0.9",
        "ppo.lam=0.9",
    )
    lines = ppo.unused_settings(loo, ppo.ppo_settings(loo))
    assert lines[0].startswith(
        "ppo.value_model, ppo.critic_learning_rate, ppo.critic_warmup_steps, ppo.lam: not used"
    )
    assert lines[1].startswith("ppo.gamma: not used")
    # REINFORCE++ discounts: its gamma is used.
    rpp = small_ppo_recipe(tmp_path / "c", "ppo.advantage_estimator=reinforce_pp", "ppo.gamma=0.9")
    assert not any("gamma" in line for line in ppo.unused_settings(rpp, ppo.ppo_settings(rpp)))


def test_a_critic_warmup_left_in_the_recipe_freezes_nothing_without_a_critic(tmp_path: Path) -> None:
    """The GSM8K recipe's critic_warmup_steps (20) outlasting a short run is no error, and the policy
    learns from the first update (seen on SmolLM2: the recipe was refused)."""
    recipe = critic_free_recipe(tmp_path / "run", "group", "ppo.critic_warmup_steps=20")
    trainer, _ = build_ppo_trainer(recipe)
    before = {name: value.clone() for name, value in trainer.model.policy.state_dict().items()}
    trainer.train()
    after = trainer.model.policy.state_dict()
    assert any(not torch.equal(before[name], after[name]) for name in before), "the policy trained"


def test_group_metrics_of_known_scores() -> None:
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5])
    metrics = group_metrics(scores, 2)
    assert metrics["reward/group_std"] == pytest.approx((0 + 0.5 + 0) / 3)
    assert metrics["frac_reward_zero_std"] == pytest.approx(2 / 3)
    assert group_metrics(scores, 1) == {}


# --------------------------------------------------------------------------------------------------
# plan, doctor, migrate
# --------------------------------------------------------------------------------------------------


def test_plan_counts_no_critic_for_a_critic_free_estimator(tmp_path: Path) -> None:
    recipe = REPO / "recipes" / "arithmetic" / "ppo.yaml"
    with_critic = run_entry([LLM_RL, "plan", str(recipe)])
    without = run_entry([LLM_RL, "plan", str(recipe), "--set", "ppo.advantage_estimator=group"])
    assert with_critic.returncode == 0 and without.returncode == 0, with_critic.stderr + without.stderr
    assert "critic" in with_critic.stdout
    assert "critic" not in without.stdout


def test_doctor_gives_critic_free_runs_no_critic_advice() -> None:
    series = {"reward/frac_zero_std": [(step, 0.9) for step in range(30)]}
    hint = ppo.flat_reward_hint(lambda key: series.get(key, []))
    assert hint is not None and "ppo.num_generations" in hint[1] and "critic" not in hint[1]
    assert ppo.flat_reward_hint(lambda key: []) is None


def test_migrate_grpo_to_a_group_estimator_keeps_the_groups_and_adds_no_critic(tmp_path: Path) -> None:
    target = tmp_path / "ppo.yaml"
    result = run_entry(
        [LLM_RL, "migrate", str(REPO / "recipes" / "arithmetic" / "grpo.yaml"), "--to", "ppo",
         "--set", "ppo.advantage_estimator=group", "-o", str(target)]
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    section = yaml.safe_load(target.read_text())["ppo"]
    assert section["advantage_estimator"] == "group" and section["num_generations"] == 8
    assert not {"value_model", "critic_learning_rate", "critic_warmup_steps"} & section.keys()
    assert "grpo.num_generations" in result.stdout and "warning" not in result.stderr
    back = tmp_path / "grpo.yaml"
    again = run_entry([LLM_RL, "migrate", str(target), "--to", "grpo", "-o", str(back)])
    assert again.returncode == 0, again.stderr
    assert yaml.safe_load(back.read_text())["grpo"]["num_generations"] == 8
    assert "ppo.advantage_estimator" in again.stderr, "the estimator has no GRPO key: said so"


def test_migrate_grpo_to_gae_still_adds_the_critic(tmp_path: Path) -> None:
    target = tmp_path / "ppo.yaml"
    result = run_entry(
        [LLM_RL, "migrate", str(REPO / "recipes" / "arithmetic" / "grpo.yaml"), "--to", "ppo", "-o", str(target)]
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    section = yaml.safe_load(target.read_text())["ppo"]
    assert {"value_model", "critic_learning_rate", "critic_warmup_steps"} <= section.keys()
    assert "num_generations" not in section


def test_compare_labels_a_critic_free_run_with_its_estimator() -> None:
    from llm_rl.tools.compare.runs import algorithm_label

    critic_free = {"algorithm": "ppo", "ppo": {"advantage_estimator": "rloo"}}
    assert algorithm_label({"algorithm": "ppo"}, critic_free) == "ppo (leave_one_out advantages, no critic)"
    assert algorithm_label(None, {"algorithm": "ppo", "ppo": {"kl_coef": 0.0}}) == "ppo"
    assert algorithm_label({"algorithm": "grpo"}, {"algorithm": "grpo"}) == "grpo"
    assert algorithm_label(None, {}) is None


def test_a_critic_free_stage_takes_no_critic_from_the_stage_before(tmp_path: Path) -> None:
    final = tmp_path / "final"
    (final / "value_model").mkdir(parents=True)
    critic_free = critic_free_recipe(tmp_path / "run", "group")
    ppo.hand_over(critic_free, final, {})
    assert critic_free.section("ppo")["value_model"] == "policy", "the recipe's own, unused"
    with_critic = small_ppo_recipe(tmp_path / "run")
    ppo.hand_over(with_critic, final, {})
    assert with_critic.section("ppo")["value_model"] == str(final / "value_model")


# --------------------------------------------------------------------------------------------------
# Learning
# --------------------------------------------------------------------------------------------------

# The rise of reward every algorithm's embedded default shows (docs/benchmarks.md).
RISE = 0.30


@pytest.mark.slow
@pytest.mark.parametrize("estimator", CRITIC_FREE)
def test_the_embedded_default_learns_under_each_critic_free_estimator(tmp_path: Path, estimator: str) -> None:
    """PPO's whole embedded budget (19,200 samples, about 40 s), seed 0: the last 20% of rows at least 0.30
    above the first 20% (`scripts/learning_curve.py --table` measures seeds 0-2 of each)."""
    output = tmp_path / "run"
    result = run_entry(
        ["recipes/ppo.py", "--set", f"ppo.advantage_estimator={estimator}", "--set", f"run.output_dir={output}",
         "--set", "monitoring.wandb.mode=disabled", "--set", "monitoring.progress=false"],
        timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    first, last = first_and_last_mean(rows(output))
    assert last - first >= RISE, f"reward {first:.3f} -> {last:.3f}"
