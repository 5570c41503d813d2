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
logged, and whose recipe may not set the critic's keys.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import PreTrainedModel, TrainerCallback, TrainingArguments

from llm_rl.algorithms.base import Components, Counterpart, Series, SharedOverride
from llm_rl.algorithms.ppo.critic import load_value_model, value_model_source
from llm_rl.algorithms.ppo.estimators import Estimator, find_estimator
from llm_rl.algorithms.ppo.settings import (
    CRITIC_KEYS,
    GROUP_DEFAULT,
    PPO_REFUSED_KEYS,
    PPOSettings,
    ppo_settings,
)
from llm_rl.algorithms.trl_groups import migrated_group, zero_spread_hint
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
    is_main_process,
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


# What `advantages.normalize: auto` means under each estimator; `auto` and `none` are always accepted.
AUTO_NORMALIZATION = {
    "gae": "batch",
    "reinforce_pp": "batch",
    "reinforce_pp_baseline": "batch",
    "group": "group",
    "leave_one_out": "none",
}
# Keys a critic-free estimator has no use for beyond the critic's own (`CRITIC_KEYS`): GAE's lambda and
# its reward whitening.
CRITIC_FREE_UNUSED = ("lam", "whiten_rewards")


@dataclass
class PPOInputs:
    """What `prepare` loads for the trainer: the tokenized prompts, the critic (None for a critic-free
    estimator) and the reference model."""

    prompts: Any
    critic: PreTrainedModel | None
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
    """The recipe as PPO runs it: an estimator with what it needs, and batch arithmetic that works."""
    check_vllm(recipe)
    if not recipe.stages:
        # A staged recipe's own budget is no stage's; each stage is checked as a recipe of its own.
        settings = ppo_settings(recipe)
        check_estimator(recipe, settings)
        check_settings(recipe, settings)


def check_estimator(recipe: Recipe, settings: PPOSettings) -> None:
    """The advantage estimator's needs: groups that fit the batch and a normalisation it has."""
    estimator = settings.advantage_estimator
    normalize = recipe.advantages.normalize
    if normalize not in ("auto", "none", AUTO_NORMALIZATION[estimator]):
        raise RecipeError(
            f"advantages.normalize: {normalize!r} does not apply to ppo.advantage_estimator {estimator!r}, "
            f"which normalises by {AUTO_NORMALIZATION[estimator]} (auto) or not at all (none)"
            + (
                "; for GRPO's group normalisation set ppo.advantage_estimator: group"
                if normalize == "group"
                else ""
            )
        )
    group_size, local_batch = settings.group_size, rollout_batch(recipe)
    if settings.estimator.needs_groups and group_size < 2:
        raise RecipeError(
            f"ppo.num_generations: the {estimator} estimator's baseline is the other completions of the same "
            f"prompt, so it needs at least 2 per prompt (got {group_size})"
        )
    if local_batch % group_size:
        raise RecipeError(
            f"ppo.num_generations ({group_size}) must divide PPO's rollout batch of {local_batch} completions per "
            "process (training.per_device_batch_size x gradient_accumulation_steps): each process samples "
            "whole groups"
        )


def check_vllm(recipe: Recipe) -> None:
    """PPO's vLLM engines run inside the training processes, and PPO trains on its own log-probs."""
    if recipe.generation.backend != "vllm":
        return
    section = recipe.generation.vllm
    if section.mode != "colocate":
        raise RecipeError(f"generation.vllm.mode: {COLOCATED_ONLY}")
    if section.importance_sampling is not None:
        raise RecipeError(f"generation.vllm.importance_sampling: {OWN_LOGPROBS}; remove the key")


def unused_settings(recipe: Recipe, settings: PPOSettings) -> list[str]:
    """The recipe's settings the estimator does not read, each with why: a critic-free estimator's
    critic keys (a recipe keeps them when it switches estimator, as it keeps an inactive algorithm's
    section), and `gamma` where the estimator does not discount. Warnings, not errors."""
    if settings.needs_critic:
        return []
    estimator = settings.advantage_estimator
    section, scheduled = recipe.section(NAME), recipe.schedules
    given = [f"{NAME}.{key}" for key in (*CRITIC_KEYS, *CRITIC_FREE_UNUSED)]
    given = [key for key in given if key.split(".")[1] in section or key in scheduled]
    lines = []
    if given:
        lines.append(
            f"{', '.join(given)}: not used, as ppo.advantage_estimator {estimator!r} trains no critic "
            "(these set the critic, GAE's lambda or its reward whitening)"
        )
    discounted = settings.gamma != 1.0 or f"{NAME}.gamma" in scheduled
    if settings.estimator.needs_groups and discounted:
        lines.append(
            f"{NAME}.gamma: not used, as ppo.advantage_estimator {estimator!r} gives each completion one "
            "undiscounted advantage, from its score against its group's (reinforce_pp discounts)"
        )
    if recipe.advantages.whiten_rewards:
        lines.append(f"advantages.whiten_rewards: not used, as it whitens GAE's rewards ({estimator})")
    return lines


# --- a run ---


def rollout_batch(recipe: Recipe) -> int:
    """Completions per update and process: `training.per_device_batch_size x gradient_accumulation_steps`."""
    return recipe.training.per_device_batch_size * recipe.training.gradient_accumulation_steps


def prompts_per_update(recipe: Recipe) -> int:
    """Prompts per update and process: the rollout batch over `ppo.num_generations`."""
    return rollout_batch(recipe) // ppo_settings(recipe).group_size


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


def variant(recipe: dict[str, Any]) -> str | None:
    """The advantage estimator, when it is not GAE with a critic."""
    estimator = chosen_estimator(recipe)
    return None if estimator.needs_critic else f"{estimator.name} advantages, no critic"


# --- `llm-rl migrate` ---

# The critic learns this many times faster than the policy (verl's and our arithmetic recipe's ratio).
CRITIC_LR_FACTOR = 10.0
# Critic warm-up in migrated PPO recipes: this share of the run's updates, at most CRITIC_WARMUP_MAX.
CRITIC_WARMUP_SHARE = 0.05
CRITIC_WARMUP_MAX = 50


def chosen_estimator(recipe: dict[str, Any]) -> Estimator:
    """The estimator a (migrated) recipe's `ppo:` section names, GAE by default."""
    section = recipe.get(NAME) or {}
    return find_estimator(str(section.get("advantage_estimator", PPOSettings().advantage_estimator)))


def missing_counterparts(recipe: dict[str, Any]) -> dict[str, str]:
    """The group algorithms' settings that PPO has no counterpart for, and the nearest thing where
    there is one. Under a group estimator (`ppo.advantage_estimator`), `num_generations` is PPO's too."""
    groups = {} if chosen_estimator(recipe).needs_groups else {"num_generations": batch_semantics(recipe)}
    return {
        **groups,
        "num_generations_eval": "PPO's held-out reward samples one completion per prompt",
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
    """The critic a migrated PPO recipe starts with: where from, how fast it learns, its warm-up; under
    a critic-free estimator, no critic, and groups where the estimator needs them."""
    estimator = chosen_estimator({NAME: section})
    if not estimator.needs_critic:
        if not estimator.needs_groups:
            return []
        return migrated_group(recipe, section, NAME, GROUP_DEFAULT)
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
