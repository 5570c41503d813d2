"""PPO: TRL's PPOTrainer (through `llm_rl.ppo_trainer`) built from a recipe.

The shared sections map onto `PPOConfig` as for GRPO; the `ppo:` section takes PPOConfig fields by
their TRL names plus our own keys (`llm_rl.recipe.PPOSettings`). Defaults differ from TRL's in two places, both for
LLM work: responses stop at EOS (`stop_token: eos`; TRL's default scores every token up to the length
limit), and TRL's periodic sample tables are off (`num_sample_generations: 0`; our metrics cover them).
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedModel, TrainerCallback

from llm_rl.components import Components
from llm_rl.data import tokenize_prompts
from llm_rl.errors import DataError, ModelError, RecipeError
from llm_rl.lora import peft_config
from llm_rl.models import load_policy
from llm_rl.ppo_rewards import RewardAdapter
from llm_rl.ppo_trainer import UnifiedPPOTrainer
from llm_rl.recipe import PPO_OWN_KEYS, Recipe, ppo_settings
from llm_rl.schedules import start_values
from llm_rl.training_args import (
    SampleCounter,
    sample_counter,
    shared_training_args,
    steps_for_budget,
    world_size,
)
from llm_rl.trl_ppo import PPOConfig
from llm_rl.value_model import load_value_model

# TRL's PPO log names (and the ones our loop adds) -> the unified names of metrics.jsonl (DESIGN.md).
METRIC_NAMES = {
    "objective/scores": "reward/mean",
    "objective/scores_std": "reward/std",
    "objective/kl": "kl",
    # Per-token entropy, as GRPO logs it (TRL's objective/entropy sums over the sequence).
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
    "critic_warmup": "value/warmup",
}

# Our defaults for PPOConfig fields, where they differ from TRL's (module docstring).
PPO_DEFAULTS: dict[str, Any] = {"stop_token": "eos", "num_sample_generations": 0}


def samples_per_step(recipe: Recipe) -> int:
    """Episodes (prompt-completion pairs) per PPO update over all processes (TRL's `batch_size`)."""
    training = recipe.training
    return training.per_device_batch_size * training.gradient_accumulation_steps * world_size()


def count_samples(recipe: Recipe) -> SampleCounter:
    """The sample counter for the metrics and checkpoint names: updates so far x episodes per update."""
    return sample_counter(samples_per_step(recipe))


def trl_config(recipe: Recipe) -> PPOConfig:
    """The `PPOConfig` for a recipe: shared sections, our defaults, then the recipe's PPOConfig keys."""
    check_batches(recipe)
    per_step = samples_per_step(recipe)
    fields: dict[str, Any] = shared_training_args(recipe, per_step)
    local_batch = recipe.training.per_device_batch_size * recipe.training.gradient_accumulation_steps
    fields.update(
        PPO_DEFAULTS,
        response_length=recipe.generation.max_new_tokens,
        temperature=recipe.generation.temperature,
        total_episodes=steps_for_budget(recipe, per_step) * per_step,
        local_rollout_forward_batch_size=min(64, local_batch),
    )
    if recipe.advantages.whiten_rewards:
        fields["whiten_rewards"] = True
    fields.update({k: v for k, v in recipe.ppo.items() if k not in PPO_OWN_KEYS})
    fields.update({k: v for k, v in start_values(recipe).items() if k not in PPO_OWN_KEYS})
    try:
        return PPOConfig(**fields)
    except (ValueError, TypeError) as err:
        raise RecipeError(f"ppo: TRL's PPOConfig rejects these settings: {err}") from None


def check_batches(recipe: Recipe) -> None:
    """The batch arithmetic TRL asserts on, checked first and explained."""
    training = recipe.training
    local_batch = training.per_device_batch_size * training.gradient_accumulation_steps
    mini_batches = recipe.ppo.get("num_mini_batches", 1)
    if not isinstance(mini_batches, int) or mini_batches < 1:
        raise RecipeError("ppo.num_mini_batches: must be a positive integer")
    if local_batch % mini_batches:
        raise RecipeError(
            f"ppo.num_mini_batches ({mini_batches}) must divide the rollout batch per process "
            f"(training.per_device_batch_size x gradient_accumulation_steps = {local_batch}): "
            "each PPO epoch splits the rollout into that many equal mini-batches"
        )
    mini_batch = local_batch // mini_batches
    if mini_batch % training.per_device_batch_size:
        raise RecipeError(
            f"a PPO mini-batch of {mini_batch} samples is not a whole number of micro-batches of "
            f"training.per_device_batch_size ({training.per_device_batch_size})"
        )
    if (recipe.ppo.get("whiten_rewards") or recipe.advantages.whiten_rewards) and mini_batch < 8:
        raise RecipeError(
            f"ppo.whiten_rewards needs at least 8 samples per mini-batch and process (here {mini_batch}): "
            "whitening over fewer is noise"
        )
    warmup = ppo_settings(recipe).critic_warmup_steps
    steps = steps_for_budget(recipe, samples_per_step(recipe))
    if warmup >= steps:
        raise RecipeError(
            f"ppo.critic_warmup_steps ({warmup}) is not below the run's {steps} updates: the policy would never train"
        )


def prepare(components: Components) -> None:
    """Everything PPO adds that can fail on bad input, before the run folder is touched."""
    recipe, tokenizer = components.recipe, components.tokenizer
    ppo_settings(recipe)
    if tokenizer.pad_token_id is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        raise ModelError(
            "PPO needs a pad token distinct from EOS (TRL reads scores and values at the last non-pad "
            "token); give model.tokenizer one with its own pad token",
            where=recipe.model.tokenizer or recipe.model.policy,
        )
    local_batch = recipe.training.per_device_batch_size * recipe.training.gradient_accumulation_steps
    if len(components.data.train) < local_batch:
        raise DataError(
            f"{len(components.data.train)} training prompts are fewer than one PPO rollout batch per process "
            f"({local_batch}); TRL's PPO would wait forever for a full batch",
            where=recipe.data.source,
        )
    components.extras = {
        "train_tokens": tokenize_prompts(components.data.train, tokenizer),
        "value_model": load_value_model(recipe, components.policy_path, tokenizer),
        "reference_model": reference_model(recipe),
    }


def sampling_settings(recipe: Recipe) -> dict[str, Any]:
    """What the generation section adds to TRL's PPO sampling (temperature and length are PPOConfig's)."""
    generation = recipe.generation
    settings: dict[str, Any] = {"top_p": generation.top_p, "top_k": generation.top_k or 0}
    if generation.min_new_tokens is not None:
        settings["min_new_tokens"] = generation.min_new_tokens
    return settings


def reference_model(recipe: Recipe) -> PreTrainedModel | None:
    """A second, frozen copy of the policy loaded from its folder; None with LoRA (the adapter-free policy).

    Loaded rather than copied from the policy in memory, as TRL's copy fails under DeepSpeed ZeRO-3.
    """
    if recipe.model.lora.enabled:
        return None
    return load_policy(recipe.model, recipe.training.precision)


def build_trainer(components: Components, callbacks: list[TrainerCallback]) -> UnifiedPPOTrainer:
    """A ready-to-train PPO trainer over the recipe's prompts, reward functions and critic."""
    recipe = components.recipe
    own = ppo_settings(recipe)
    if components.extras is None:
        prepare(components)
    extras = components.extras
    return UnifiedPPOTrainer(
        args=trl_config(recipe),
        processing_class=components.tokenizer,
        model=components.policy,
        ref_model=extras["reference_model"],
        reward_model=RewardAdapter(
            components.rewards, components.data.train, components.tokenizer, own.none_reward
        ),
        train_dataset=extras["train_tokens"],
        value_model=extras["value_model"],
        eval_dataset=extras["train_tokens"],
        callbacks=callbacks,
        peft_config=peft_config(recipe.model.lora),
        critic_learning_rate=own.critic_learning_rate,
        critic_warmup_steps=own.critic_warmup_steps,
        entropy_coef=own.entropy_coef,
        whiten_advantages=recipe.advantages.normalize in ("auto", "batch"),
        sampling=sampling_settings(recipe),
        held_out=components.held_out,
    )


def apply_setting(trainer: UnifiedPPOTrainer, key: str, value: float) -> None:
    """Set a scheduled setting (`llm_rl.recipe.SCHEDULABLE`) where the PPO loop reads it each update."""
    if key == "ppo.entropy_coef":
        trainer.entropy_coef = value
    elif key == "generation.temperature":
        trainer.args.temperature = value
        trainer.generation_kwargs["temperature"] = value + 1e-7
    else:
        setattr(trainer.args, key.removeprefix("ppo."), value)
