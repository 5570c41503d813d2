"""PPO: llm_rl's own trainer (`llm_rl.algorithms.ppo.trainer`) built from a recipe.

The shared sections map onto transformers' `TrainingArguments` as for GRPO; the `ppo:` section holds
the keys of TRL's former PPOConfig under their names and defaults, plus our own
(`llm_rl.algorithms.ppo.settings.PPOSettings`). Batches keep TRL's arithmetic: a rollout of
`training.per_device_batch_size x gradient_accumulation_steps` prompts per process, split into
`ppo.num_mini_batches` mini-batches of micro-batches of `training.per_device_batch_size`.
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedModel, TrainerCallback, TrainingArguments

from llm_rl.algorithms.base import Components
from llm_rl.algorithms.ppo.critic import load_value_model
from llm_rl.algorithms.ppo.generation import SamplingSettings
from llm_rl.algorithms.ppo.settings import PPOSettings, ppo_settings
from llm_rl.algorithms.ppo.trainer import PPOTrainer
from llm_rl.data.prompts import tokenize_prompts
from llm_rl.errors import DataError, RecipeError
from llm_rl.models.completions import eos_token_ids
from llm_rl.models.load import load_policy
from llm_rl.models.lora import peft_config
from llm_rl.rewards.scoring import RewardAdapter
from llm_rl.schema import Recipe
from llm_rl.training.args import (
    SampleCounter,
    deepspeed_config_sections,
    sample_counter,
    shared_training_args,
    steps_for_budget,
    world_size,
)
from llm_rl.training.schedules import start_values

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
}


def rollout_batch(recipe: Recipe) -> int:
    """Prompts per update and process: `training.per_device_batch_size x gradient_accumulation_steps`."""
    return recipe.training.per_device_batch_size * recipe.training.gradient_accumulation_steps


def samples_per_step(recipe: Recipe) -> int:
    """Episodes (prompt-completion pairs) per PPO update over all processes."""
    return rollout_batch(recipe) * world_size()


def count_samples(recipe: Recipe) -> SampleCounter:
    """The sample counter for the metrics and checkpoint names: updates so far x episodes per update."""
    return sample_counter(samples_per_step(recipe))


def settings_at_start(recipe: Recipe) -> PPOSettings:
    """The `ppo:` settings with every scheduled one at its value for sample 0."""
    settings = ppo_settings(recipe)
    if recipe.advantages.whiten_rewards:
        settings.whiten_rewards = True
    for key, value in start_values(recipe).items():
        if key in PPOSettings.model_fields:
            setattr(settings, key, value)
    return settings


def trainer_config(recipe: Recipe) -> TrainingArguments:
    """The `TrainingArguments` for a recipe: the shared sections, then the `ppo:` section's own
    `TrainingArguments` keys. Its `gradient_accumulation_steps` counts the micro-batches of one
    mini-batch (one optimizer step)."""
    settings = ppo_settings(recipe)
    check_settings(recipe, settings)
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


def check_settings(recipe: Recipe, settings: PPOSettings) -> None:
    """Batch arithmetic and settings that conflict, explained before anything loads."""
    training = recipe.training
    local_batch = rollout_batch(recipe)
    mini_batches = settings.num_mini_batches
    if training.gradient_accumulation_steps % mini_batches:
        raise RecipeError(
            f"ppo.num_mini_batches ({mini_batches}) must divide training.gradient_accumulation_steps "
            f"({training.gradient_accumulation_steps}): each PPO epoch splits the rollout batch of "
            f"{local_batch} prompts per process (training.per_device_batch_size x gradient_accumulation_steps) "
            f"into {mini_batches} mini-batches of whole micro-batches of training.per_device_batch_size"
        )
    mini_batch = local_batch // mini_batches
    if (settings.whiten_rewards or recipe.advantages.whiten_rewards) and mini_batch < 8:
        raise RecipeError(
            f"ppo.whiten_rewards needs at least 8 samples per mini-batch and process (here {mini_batch}): "
            "whitening over fewer is noise"
        )
    if recipe.ppo.get("stop_token") is not None and settings.stop_token_id is not None:
        raise RecipeError("ppo.stop_token and ppo.stop_token_id both set: give one")
    steps = steps_for_budget(recipe, samples_per_step(recipe))
    if settings.critic_warmup_steps >= steps:
        raise RecipeError(
            f"ppo.critic_warmup_steps ({settings.critic_warmup_steps}) is not below the run's {steps} updates: "
            "the policy would never train"
        )


def check_deepspeed_optimizer() -> None:
    """PPO builds its own optimizer and scheduler; one from the DeepSpeed config would replace them."""
    sections = deepspeed_config_sections("optimizer", "scheduler")
    if sections:
        raise RecipeError(
            f"the DeepSpeed config sets {' and '.join(sections)}, which would replace PPO's own: one optimizer "
            "with the policy and the critic in groups of their own (ppo.critic_learning_rate, "
            "ppo.critic_warmup_steps) and the recipe's schedule; remove them and set training.* instead"
        )


def prepare(components: Components) -> None:
    """Everything PPO adds that can fail on bad input, before the run folder is touched: the tokenized
    prompts, the critic and the reference model."""
    recipe, tokenizer = components.recipe, components.tokenizer
    settings = ppo_settings(recipe)
    local_batch = rollout_batch(recipe)
    if len(components.data.train) < local_batch:
        raise DataError(
            f"{len(components.data.train)} training prompts are fewer than one PPO rollout batch per process "
            f"({local_batch}: training.per_device_batch_size x gradient_accumulation_steps)",
            where=recipe.data.source,
        )
    components.extras = {
        "prompts": tokenize_prompts(components.data.train, tokenizer, num_proc=settings.dataset_num_proc),
        "critic": load_value_model(recipe, components.policy_path, tokenizer),
        "reference": reference_model(recipe),
    }


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
    generation = recipe.generation
    return SamplingSettings(
        max_new_tokens=generation.max_new_tokens,
        temperature=start_values(recipe).get("temperature", generation.temperature),
        top_p=generation.top_p,
        top_k=generation.top_k or 0,
        min_new_tokens=generation.min_new_tokens,
        stop_token_ids=stop_token_ids(settings, components),
        pad_token_id=components.tokenizer.pad_token_id,
    )


def build_trainer(components: Components, callbacks: list[TrainerCallback]) -> PPOTrainer:
    """A ready-to-train PPO trainer over the recipe's prompts, reward functions and critic."""
    recipe = components.recipe
    settings = settings_at_start(recipe)
    if components.extras is None:
        prepare(components)
    extras = components.extras
    return PPOTrainer(
        args=trainer_config(recipe),
        settings=settings,
        policy=components.policy,
        critic=extras["critic"],
        reference=extras["reference"],
        rewards=RewardAdapter(
            components.rewards, components.data.train, components.tokenizer, settings.none_reward
        ),
        prompts=extras["prompts"],
        tokenizer=components.tokenizer,
        saved_tokenizer=components.saved_tokenizer,
        sampling=sampling_settings(recipe, settings, components),
        whiten_advantages=recipe.advantages.normalize in ("auto", "batch"),
        callbacks=callbacks,
        peft_config=peft_config(recipe.model.lora),
        held_out=components.held_out,
    )


def apply_setting(trainer: PPOTrainer, key: str, value: float) -> None:
    """Set a scheduled setting (`llm_rl.recipe.load.SCHEDULABLE`) where the PPO loop reads it each update."""
    if key == "generation.temperature":
        trainer.sampling.temperature = value
    else:
        setattr(trainer.settings, key.removeprefix("ppo."), value)
