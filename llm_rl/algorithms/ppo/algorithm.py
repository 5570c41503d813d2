"""PPO: llm_rl's own trainer (`llm_rl.algorithms.ppo.trainer`) built from a recipe.

The shared sections map onto transformers' `TrainingArguments` as for GRPO; the `ppo:` section holds
the keys of TRL's former PPOConfig under their names and defaults, plus our own
(`llm_rl.algorithms.ppo.settings.PPOSettings`). Batches keep TRL's arithmetic: a rollout of
`training.per_device_batch_size x gradient_accumulation_steps` prompts per process, split into
`ppo.num_mini_batches` mini-batches of micro-batches of `training.per_device_batch_size`. With
`ppo.num_generations` completions per prompt, those rows are that many times fewer prompts, each sampled
in consecutive rows (a process holds whole groups).

`ppo.advantage_estimator` chooses how advantages are estimated (`llm_rl.algorithms.ppo.estimators`):
GAE with a critic, or a critic-free estimator, for which no value model is loaded, trained, saved or
logged (the recipe's critic keys are named once as unused).

This module is PPO's answer to the algorithm protocol (`llm_rl.algorithms.base`): the recipe checks
live in `recipe_checks`, the answers to `migrate` and `compare` in `migration`, both re-exported here.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import PreTrainedModel, TrainerCallback, TrainingArguments

from llm_rl.algorithms.base import Components, Counterpart, Series, SharedOverride
from llm_rl.algorithms.ppo.critic import load_value_model, value_model_source
from llm_rl.algorithms.ppo.migration import KEY_IDEAS as KEY_IDEAS
from llm_rl.algorithms.ppo.migration import complete_migration as complete_migration
from llm_rl.algorithms.ppo.migration import lacking as lacking
from llm_rl.algorithms.ppo.migration import variant as variant
from llm_rl.algorithms.ppo.recipe_checks import (
    OWN_LOGPROBS,
    check_deepspeed_optimizer,
    unused_settings,
)
from llm_rl.algorithms.ppo.recipe_checks import check_recipe as check_recipe
from llm_rl.algorithms.ppo.recipe_checks import check_section as check_section
from llm_rl.algorithms.ppo.recipe_checks import section_fields as section_fields
from llm_rl.algorithms.ppo.settings import (
    SECTION,
    PPOSettings,
    ppo_settings,
    prompts_per_update,
    rollout_batch,
    samples_per_step,
)
from llm_rl.algorithms.trl_groups.migration import zero_spread_hint
from llm_rl.data.prompts import tokenize_prompts
from llm_rl.errors import DataError, RecipeError
from llm_rl.generation.backends import resolve_backend
from llm_rl.generation.sampling import SamplingSettings, recipe_sampling
from llm_rl.generation.vllm_settings import SERVER_KEYS, EngineSettings, engine_settings
from llm_rl.models.completions import eos_token_ids
from llm_rl.models.load import load_policy, resolve_model_path
from llm_rl.models.lora import peft_config
from llm_rl.rewards.scoring import RewardAdapter
from llm_rl.run_folder import VALUE_MODEL_DIR
from llm_rl.schema import Recipe
from llm_rl.training.args import (
    SampleCounter,
    is_main_process,
    sample_counter,
    shared_training_args,
)
from llm_rl.training.schedules import start_values

if TYPE_CHECKING:
    from llm_rl.algorithms.ppo.trainer import PPOTrainer

NAME = SECTION

# The trainer's log names (TRL's PPOTrainer's, which PPO users know) -> the unified names of metrics.jsonl.
METRIC_NAMES = {
    "objective/scores": "reward/mean",
    "objective/scores_std": "reward/std",
    "objective/kl": "kl",
    "policy/entropy_avg": "entropy",
    "objective/non_score_reward": "reward/kl_penalty",
    "objective/rlhf_reward": "reward/with_kl_penalty",
    "grad_norm": "grad_norm",
    "value/grad_norm": "value/grad_norm",
    "loss/policy_avg": "loss/policy",
    "loss/value_avg": "loss/value",
    "val/explained_variance": "value/explained_variance",
    "val/clipfrac_avg": "value/clipfrac",
    "policy/clipfrac_avg": "policy/clipfrac",
    "policy/approxkl_avg": "policy/approxkl",
    "val/ratio": "policy/ratio",
    "lr": "learning_rate",
    "completions/mean_length": "completion_length/mean",
    "completions/clipped_ratio": "completion_length/clipped_ratio",
    "critic_warmup": "value/warmup",
    # With ppo.num_generations > 1, as GRPO logs them.
    "reward/group_std": "reward/group_std",
    "frac_reward_zero_std": "reward/frac_zero_std",
}
SCHEDULABLE = (
    "ppo.cliprange",
    "ppo.cliprange_value",
    "ppo.kl_coef",
    "ppo.lam",
    "ppo.gamma",
    "ppo.vf_coef",
    "ppo.entropy_coef",
    "generation.temperature",
)
# No scheduled setting of PPO decides anything at start-up: each may start anywhere its field allows.
STARTS_ABOVE_ZERO: dict[str, str] = {}
KL_COEFFICIENT = "ppo.kl_coef"
COUNTERPARTS = {
    "kl_coefficient": Counterpart(
        "kl_coef", PPOSettings().kl_coef, "PPO's kl_coef subtracts a per-token KL penalty from the reward"
    ),
    "clip_range": Counterpart("cliprange", PPOSettings().cliprange, "the ratio clip of the policy loss"),
    "epochs": Counterpart(
        "num_ppo_epochs", PPOSettings().num_ppo_epochs, "passes over each batch of generations"
    ),
}


NO_SERVER = (
    "a setting of the vLLM server, which PPO does not use (its engine runs inside each training process)"
)
SHARED_OVERRIDES = {
    "generation.vllm.mode": SharedOverride(
        "colocate",
        "PPO runs its vLLM engine inside each training process, on its device, taking "
        "generation.vllm.gpu_memory_utilization of its memory; a separate server is for GRPO and RLOO",
    ),
    **{f"generation.vllm.{key}": SharedOverride(None, NO_SERVER) for key in SERVER_KEYS},
    "generation.vllm.importance_sampling": SharedOverride(None, OWN_LOGPROBS),
}


@dataclass
class PPOInputs:
    """What `prepare` loads for the trainer: the tokenized prompts, the critic (None for a critic-free
    estimator) and the reference model."""

    prompts: Any
    critic: PreTrainedModel | None
    # None with LoRA: the reference is the policy with its adapter off.
    reference: PreTrainedModel | None


# --- the recipe ---


# --- a run ---


def count_samples(recipe: Recipe) -> SampleCounter:
    """The sample counter for the metrics and checkpoint names: updates so far x episodes per update."""
    return sample_counter(samples_per_step(recipe))


def settings_at_start(recipe: Recipe) -> PPOSettings:
    """The `ppo:` settings with every scheduled one at its value for sample 0."""
    settings = ppo_settings(recipe)
    if recipe.advantages.whiten_rewards:
        settings.whiten_rewards = True
    for key, value in start_values(recipe, SCHEDULABLE).items():
        if key in PPOSettings.model_fields:
            setattr(settings, key, value)
    return settings


def trainer_config(recipe: Recipe) -> TrainingArguments:
    """The `TrainingArguments` for a recipe: the shared sections, then the `ppo:` section's own
    `TrainingArguments` keys. Its `gradient_accumulation_steps` counts the micro-batches of one
    mini-batch (one optimizer step)."""
    settings = ppo_settings(recipe)
    check_deepspeed_optimizer()
    fields: dict[str, Any] = shared_training_args(recipe, samples_per_step(recipe))
    fields["gradient_accumulation_steps"] = (
        recipe.training.gradient_accumulation_steps // settings.num_mini_batches
    )
    fields.update(settings.training_arguments)
    try:
        return TrainingArguments(**fields)
    except (ValueError, TypeError) as err:
        raise RecipeError(f"ppo: transformers' TrainingArguments rejects these settings: {err}") from None


def prepare(components: Components) -> None:
    """Everything PPO adds that can fail on bad input, before the run folder is touched: the tokenized
    prompts, the critic and the reference model."""
    recipe, tokenizer = components.recipe, components.tokenizer
    settings = ppo_settings(recipe)
    if is_main_process():
        for line in unused_settings(recipe, settings):
            print(f"warning: {line}", file=sys.stderr)
    prompts = prompts_per_update(recipe)
    if len(components.data.train) < prompts:
        raise DataError(
            f"{len(components.data.train)} training prompts are fewer than one PPO rollout batch per process "
            f"({prompts} prompts: training.per_device_batch_size x gradient_accumulation_steps completions, "
            f"{settings.group_size} per prompt)",
            where=recipe.data.label,
        )
    components.prepared = PPOInputs(
        prompts=tokenize_prompts(components.data.train, tokenizer, num_proc=settings.dataset_num_proc),
        critic=load_value_model(recipe, components.policy_path, tokenizer) if settings.needs_critic else None,
        reference=reference_model(recipe),
    )


def reference_model(recipe: Recipe) -> PreTrainedModel | None:
    """A second, frozen copy of the policy loaded from its folder; None with LoRA (the adapter-free policy)."""
    if recipe.model.lora.enabled:
        return None
    return load_policy(recipe.model, recipe.training.precision)


def stop_token_ids(settings: PPOSettings, components: Components) -> list[int]:
    """The token ids that end a response: `stop_token_id` when given (it replaces the default
    `stop_token: eos`), every EOS id with `stop_token: eos`, or none."""
    if settings.stop_token_id is not None:
        return [settings.stop_token_id]
    if settings.stop_token == "eos":
        return eos_token_ids(components.tokenizer, components.policy.generation_config)
    return []


def sampling_settings(recipe: Recipe, settings: PPOSettings, components: Components) -> SamplingSettings:
    """How rollouts sample: the generation section, its scheduled temperature, and the stop tokens."""
    return recipe_sampling(
        recipe.generation,
        stop_token_ids(settings, components),
        components.tokenizer.pad_token_id,
        temperature=start_values(recipe, SCHEDULABLE).get("temperature"),
    )


def build_trainer(components: Components, callbacks: list[TrainerCallback]) -> PPOTrainer:
    """A ready-to-train PPO trainer over the recipe's prompts, reward functions and critic."""
    from llm_rl.algorithms.ppo.trainer import PPOTrainer

    recipe = components.recipe
    settings = settings_at_start(recipe)
    if components.prepared is None:
        prepare(components)
    inputs: PPOInputs = components.prepared
    return PPOTrainer(
        args=trainer_config(recipe),
        settings=settings,
        policy=components.policy,
        critic=inputs.critic,
        reference=inputs.reference,
        rewards=RewardAdapter(
            components.rewards, components.data.train, components.tokenizer, settings.none_reward
        ),
        prompts=inputs.prompts,
        tokenizer=components.tokenizer,
        saved_tokenizer=components.saved_tokenizer,
        sampling=sampling_settings(recipe, settings, components),
        whiten_advantages=recipe.advantages.normalize != "none",
        callbacks=callbacks,
        peft_config=peft_config(recipe.model.lora),
        held_out=components.held_out,
        generation_batch_size=recipe.generation.batch_size,
        vllm_engine=vllm_engine(recipe, components),
    )


def vllm_engine(recipe: Recipe, components: Components) -> EngineSettings | None:
    """How PPO's vLLM engine starts, for `generation.backend: vllm`: from the policy's folder, sampling with
    the recipe's settings alone (not the model's generation config)."""
    if resolve_backend(recipe.generation.backend) != "vllm":
        return None
    tokenizer = recipe.model.tokenizer
    tokenizer_path = (
        resolve_model_path(tokenizer, needs_config=False, key="model.tokenizer") if tokenizer else None
    )
    return engine_settings(recipe, components.policy_path, tokenizer_path, model_generation_config=False)


def apply_setting(trainer: PPOTrainer, key: str, value: float) -> None:
    """Set a scheduled setting (one of SCHEDULABLE) where the PPO loop reads it each update."""
    if key == "generation.temperature":
        trainer.sampling.temperature = value
    else:
        setattr(trainer.settings, key.removeprefix("ppo."), value)


def finish_from_checkpoint(trainer: PPOTrainer, checkpoint: Path) -> None:
    """PPO's own loop resumes at the budget without an update."""
    trainer.train(resume_from_checkpoint=str(checkpoint))


def hand_over(stage: Recipe, previous_final: Path, overrides: dict[str, Any]) -> None:
    """A PPO stage with a critic after a PPO stage with one keeps the trained critic, unless the stage
    names its own."""
    critic = previous_final / VALUE_MODEL_DIR
    keeps = critic.is_dir() and ppo_settings(stage).needs_critic
    if keeps and "value_model" not in (overrides.get(NAME) or {}):
        stage.with_section(NAME, {**stage.section(NAME), "value_model": str(critic)})


# --- `llm-rl plan` ---


def critic_path(recipe: Recipe, policy_path: str) -> str | None:
    """The critic's folder; None for a critic-free estimator."""
    if not ppo_settings(recipe).needs_critic:
        return None
    return value_model_source(recipe, policy_path)[0]


def needs_reference(recipe: Recipe) -> bool:
    """The KL penalty's reference model is always loaded (the adapter-free policy under LoRA)."""
    return True


def generation_batch(recipe: Recipe) -> int:
    """A rollout batch is generated `generation.batch_size` sequences at a time, by default
    `local_rollout_forward_batch_size`."""
    chunk = recipe.generation.batch_size or ppo_settings(recipe).local_rollout_forward_batch_size
    return min(chunk, rollout_batch(recipe))


# --- `llm-rl doctor` ---


def flat_reward_hint(series: Series) -> tuple[str, str] | None:
    """What explained variance says about the critic, and what to change; for a critic-free run (no value
    metrics), what the groups' spread says, if it logged one."""
    variance = series("value/explained_variance")
    if not variance:
        return zero_spread_hint(series, NAME)
    median = statistics.median(v for _, v in variance[len(variance) // 2 :])
    diagnosis = f"the critic's explained variance over the second half was {median:.2f}"
    # A critic that explains nothing learns too slowly; one that explains everything fits too fast.
    if median < 0.1:
        advice = "the critic lags: raise ppo.critic_learning_rate or ppo.critic_warmup_steps"
    elif median > 0.95:
        advice = "the critic fits the returns almost exactly, leaving advantages near 0: lower ppo.critic_learning_rate"
    else:
        advice = "raise training.learning_rate, or check the reward on sample completions"
    return diagnosis, advice


# --- `llm-rl compare` ---


# --- `llm-rl migrate` ---
