"""PPO: llm_rl's own trainer (`llm_rl.algorithms.ppo.trainer`) built from a recipe.

The shared sections map onto transformers' `TrainingArguments` as for GRPO; the `ppo:` section holds
the keys of TRL's former PPOConfig under their names and defaults, plus our own
(`llm_rl.algorithms.ppo.settings.PPOSettings`). Batches keep TRL's arithmetic: a rollout of
`training.per_device_batch_size x gradient_accumulation_steps` prompts per process, split into
`ppo.num_mini_batches` mini-batches of micro-batches of `training.per_device_batch_size`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import PreTrainedModel, TrainerCallback, TrainingArguments

from llm_rl.algorithms.base import Components, Counterpart, Series, SharedOverride
from llm_rl.algorithms.ppo.critic import load_value_model, value_model_source
from llm_rl.algorithms.ppo.settings import PPO_REFUSED_KEYS, PPOSettings, ppo_settings
from llm_rl.data.prompts import tokenize_prompts
from llm_rl.errors import DataError, RecipeError, did_you_mean
from llm_rl.generation.backends import resolve_backend
from llm_rl.generation.sampling import SamplingSettings, recipe_sampling
from llm_rl.generation.vllm_settings import (
    IMPORTANCE_SAMPLING_FIELDS,
    SERVER_KEYS,
    EngineSettings,
    engine_settings,
)
from llm_rl.models.completions import eos_token_ids
from llm_rl.models.load import load_policy, resolve_model_path
from llm_rl.models.lora import peft_config
from llm_rl.rewards.scoring import RewardAdapter
from llm_rl.run_folder import VALUE_MODEL_DIR
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

if TYPE_CHECKING:
    from llm_rl.algorithms.ppo.trainer import PPOTrainer

NAME = "ppo"

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


# What PPO's vLLM generation cannot do, and why: for the recipe checks and `llm-rl migrate`.
COLOCATED_ONLY = (
    "PPO runs its vLLM engine inside each training process (colocate); a separate server is for GRPO and RLOO"
)
OWN_LOGPROBS = (
    "PPO trains on the log-probs its own forward pass computes for the sampled tokens, never on the engine's"
)
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
    """What `prepare` loads for the trainer: the tokenized prompts, the critic and the reference model."""

    prompts: Any
    critic: PreTrainedModel
    # None with LoRA: the reference is the policy with its adapter off.
    reference: PreTrainedModel | None


# --- the recipe ---


def section_fields() -> frozenset[str]:
    """The `ppo:` keys: our schema's PPO keys and the fields of `TrainingArguments`, less those refused."""
    arguments = frozenset(f.name for f in dataclasses.fields(TrainingArguments) if f.init)
    return (frozenset(PPOSettings.model_fields) | arguments) - PPO_REFUSED_KEYS.keys()


def check_section(section: dict[str, Any], recipe: Recipe) -> None:
    """`ppo:` keys are PPO keys of ours (`PPOSettings`) or `TrainingArguments` fields, with valid values."""
    fields = section_fields()
    for key in section:
        if key in PPO_REFUSED_KEYS:
            raise RecipeError(f"ppo.{key}: not used by llm_rl's PPO: {PPO_REFUSED_KEYS[key]}")
        if key not in fields:
            # Suggest the PPO keys first: a misspelt PPO key is likelier than a TrainingArguments field.
            hint = did_you_mean(
                key, [*PPOSettings.model_fields, *sorted(fields - PPOSettings.model_fields.keys())]
            )
            raise RecipeError(
                f"ppo.{key}: not a PPO key (TRL's PPOConfig names, llm_rl's own, or TrainingArguments "
                f"fields){hint}"
            )
    ppo_settings(recipe)
    if recipe.advantages.whiten_rewards and "whiten_rewards" in section:
        raise RecipeError(
            "advantages.whiten_rewards and ppo.whiten_rewards both set: they are the same setting; keep one"
        )


def check_recipe(recipe: Recipe) -> None:
    """The recipe as PPO runs it: no groups to normalise over, and batch arithmetic that works."""
    if recipe.advantages.normalize == "group":
        raise RecipeError(
            "advantages.normalize: 'group' needs GRPO's groups of completions per prompt; "
            "PPO samples one completion per prompt: use 'batch' or 'none'"
        )
    check_vllm(recipe)
    if not recipe.stages:
        # A staged recipe's own budget is no stage's; each stage is checked as a recipe of its own.
        check_settings(recipe, ppo_settings(recipe))


def check_vllm(recipe: Recipe) -> None:
    """PPO's vLLM engines run inside the training processes, and PPO trains on its own log-probs."""
    if recipe.generation.backend != "vllm":
        return
    section = recipe.generation.vllm
    if section.mode != "colocate":
        raise RecipeError(f"generation.vllm.mode: {COLOCATED_ONLY}")
    if section.importance_sampling is not None:
        raise RecipeError(f"generation.vllm.importance_sampling: {OWN_LOGPROBS}; remove the key")


# --- a run ---


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
    batch_size = recipe.generation.batch_size
    if batch_size is not None and batch_size > local_batch:
        raise RecipeError(
            f"generation.batch_size ({batch_size}) is above PPO's rollout batch of {local_batch} prompts per "
            "process (training.per_device_batch_size x gradient_accumulation_steps): PPO generates one update's "
            "prompts at a time; raise gradient_accumulation_steps to generate more at once"
        )
    mini_batch = local_batch // mini_batches
    if (settings.whiten_rewards or recipe.advantages.whiten_rewards) and mini_batch < 8:
        raise RecipeError(
            f"ppo.whiten_rewards needs at least 8 samples per mini-batch and process (here {mini_batch}): "
            "whitening over fewer is noise"
        )
    if recipe.section(NAME).get("stop_token") is not None and settings.stop_token_id is not None:
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
            where=recipe.data.label,
        )
    components.prepared = PPOInputs(
        prompts=tokenize_prompts(components.data.train, tokenizer, num_proc=settings.dataset_num_proc),
        critic=load_value_model(recipe, components.policy_path, tokenizer),
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
        whiten_advantages=recipe.advantages.normalize in ("auto", "batch"),
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
    """A PPO stage after a PPO stage keeps the trained critic, unless the stage names its own."""
    critic = previous_final / VALUE_MODEL_DIR
    if critic.is_dir() and "value_model" not in (overrides.get(NAME) or {}):
        stage.with_section(NAME, {**stage.section(NAME), "value_model": str(critic)})


# --- `llm-rl plan` ---


def critic_path(recipe: Recipe, policy_path: str) -> str | None:
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


def flat_reward_hint(series: Series) -> tuple[str, str]:
    """What value loss and explained variance say about the critic, and what to change."""
    variance = series("value/explained_variance")
    median = statistics.median(v for _, v in variance[len(variance) // 2 :]) if variance else None
    if median is None:
        diagnosis = "no value/explained_variance logged"
    else:
        diagnosis = f"the critic's explained variance over the second half was {median:.2f}"
    # A critic that explains nothing learns too slowly; one that explains everything fits too fast.
    if median is not None and median < 0.1:
        advice = "the critic lags: raise ppo.critic_learning_rate or ppo.critic_warmup_steps"
    elif median is not None and median > 0.95:
        advice = "the critic fits the returns almost exactly, leaving advantages near 0: lower ppo.critic_learning_rate"
    else:
        advice = "raise training.learning_rate, or check the reward on sample completions"
    return diagnosis, advice


# --- `llm-rl migrate` ---

# The critic learns this many times faster than the policy (verl's and our arithmetic recipe's ratio).
CRITIC_LR_FACTOR = 10.0
# Critic warm-up in migrated PPO recipes: this share of the run's updates, at most CRITIC_WARMUP_MAX.
CRITIC_WARMUP_SHARE = 0.05
CRITIC_WARMUP_MAX = 50


def missing_counterparts(recipe: dict[str, Any]) -> dict[str, str]:
    """The group algorithms' settings that PPO has no counterpart for, and the nearest thing where
    there is one."""
    return {
        "num_generations": batch_semantics(recipe),
        "num_generations_eval": "PPO samples one completion per prompt",
        "loss_type": "PPO's loss is the clipped surrogate averaged over tokens",
        "scale_rewards": "PPO normalises advantages itself; ppo.whiten_rewards is the nearest knob",
        "epsilon_high": "PPO's clip is symmetric (ppo.cliprange)",
        "mask_truncated_completions": "nearest: ppo.missing_eos_penalty",
        "steps_per_generation": "PPO generates each update's batch; ppo.num_mini_batches splits it",
        "generation_batch_size": "PPO generates each update's batch",
        "importance_sampling_level": "no sequence-level ratio in PPO",
        "top_entropy_quantile": "no entropy masking in PPO",
        "delta": "no two-sided clipping in PPO",
        "sync_ref_model": "PPO's reference model stays fixed",
        "router_aux_loss_coef": "PPO adds no Mixture-of-Experts load-balancing loss",
        **dict.fromkeys(IMPORTANCE_SAMPLING_FIELDS, OWN_LOGPROBS),
        "vllm_model_impl": "PPO's vLLM engine lets vLLM choose the model's implementation (auto)",
        "vllm_structured_outputs_regex": "PPO samples without structured outputs",
        **{key: f"llm_rl's PPO does not use it: {why}" for key, why in PPO_REFUSED_KEYS.items()},
    }


def batch_semantics(recipe: dict[str, Any]) -> str:
    """What an update's batch holds under a group algorithm and under PPO."""
    training = recipe.get("training") or {}
    batch = training.get("per_device_batch_size", 8) * training.get("gradient_accumulation_steps", 1)
    source = recipe.get(recipe.get("algorithm", "grpo")) or {}
    group = source.get("num_generations", 8)
    if batch % group == 0:
        was = f"{batch // group} prompts x {group} completions"
    else:  # the groups span devices (open-r1's 16 x 4 per device with groups of 14 on 7 GPUs)
        was = f"groups of {group} completions spread over the devices"
    return (
        f"PPO samples one completion per prompt (its critic, not a group, gives the baseline): an update's "
        f"{batch} samples per device are now {batch} prompts, not {was}"
    )


def complete_migration(recipe: dict[str, Any], section: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """The critic a migrated PPO recipe starts with: where from, how fast it learns, its warm-up."""
    rewards = recipe.get("rewards") or []
    has_reward_model = any(isinstance(r, dict) and r.get("name") == "reward_model" for r in rewards)
    shared = Recipe.model_validate(
        {k: copy.deepcopy(v) for k, v in recipe.items() if k in Recipe.model_fields}
    )
    section["value_model"] = "reward_model" if has_reward_model else "policy"
    # Rounded to the digits a person writes: 1e-6 x 10 is 9.999999999999999e-06 in binary floats.
    section["critic_learning_rate"] = float(f"{shared.training.learning_rate * CRITIC_LR_FACTOR:.6g}")
    per_update = shared.training.per_device_batch_size * shared.training.gradient_accumulation_steps
    updates = steps_for_budget(shared, per_update)
    section["critic_warmup_steps"] = min(CRITIC_WARMUP_MAX, math.floor(updates * CRITIC_WARMUP_SHARE))
    return [
        (
            "value_model",
            section["value_model"],
            "the critic starts from the reward model"
            if has_reward_model
            else "the policy's weights, a new head",
        ),
        ("critic_learning_rate", section["critic_learning_rate"], "10 x training.learning_rate"),
        (
            "critic_warmup_steps",
            section["critic_warmup_steps"],
            f"5% of the run's {updates} updates, at most 50",
        ),
    ]
