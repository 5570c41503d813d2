"""What GRPO and RLOO share: TRL trainers that sample a group of completions per prompt and take
llm_rl's reward functions as they are.

Each of the two algorithm modules names its TRL config and trainer, its defaults and its advantage
keys; the recipe checks, the mapping of the shared sections, the trainer with llm_rl's metrics, and
what `plan`, `doctor` and `migrate` ask of a group algorithm are here, once. The TRL trainer classes
are imported only when a trainer is built, so that the tools that ask an algorithm about a recipe
never load one.

Log-probs without full-vocabulary logits need no switch here: TRL 1.16's GRPO and RLOO trainers always
patch the policy's (and the reference's) forward with a fused LM head (`trl.trainer.utils.add_fused_lm_head`):
`_get_per_token_logps_and_entropies` calls it with `fused_lm_head=True`, and it projects the final
hidden states of the completion positions through the head in tiles, with a custom backward
(`_ChunkedLogProbFunction`), so no batch x length x vocabulary tensor is made. Its one option,
`grpo.cast_lm_head_to_fp32` (GRPO only; RLOOConfig has no such field), passes through like any other key. (Liger's fused linear cross-entropy
is refused by TRL for the same reason.) llm_rl's PPO does the same in `llm_rl.algorithms.ppo.forward`.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_rl.algorithms.base import Counterpart, SharedOverride
from llm_rl.data.prompts import longest_prompt
from llm_rl.errors import RecipeError, did_you_mean
from llm_rl.generation.backends import resolve_backend, with_backend
from llm_rl.generation.transformers_generators import paged_cache_config
from llm_rl.generation.vllm_settings import IMPORTANCE_SAMPLING_FIELDS
from llm_rl.schema import Recipe
from llm_rl.training.args import shared_training_args, world_size
from llm_rl.training.checkpoint_files import load_weights
from llm_rl.training.checkpoints import StagedCheckpoints
from llm_rl.training.evaluation import EvaluateAtStart, HeldOutReward
from llm_rl.training.schedules import start_values

if TYPE_CHECKING:
    from transformers import PreTrainedModel, Trainer, TrainerCallback, TrainingArguments

    from llm_rl.algorithms.base import Components, Series

# The log names TRL's GRPO and RLOO trainers share -> the unified names of metrics.jsonl (DESIGN.md).
METRIC_NAMES = {
    "reward": "reward/mean",
    "reward_std": "reward/std",
    "reward/group_std": "reward/group_std",
    "group_size": "group_size",
    "frac_reward_zero_std": "reward/frac_zero_std",
    "kl": "kl",
    "grad_norm": "grad_norm",
    "loss": "loss/policy",
    "learning_rate": "learning_rate",
    "completions/mean_length": "completion_length/mean",
    "completions/clipped_ratio": "completion_length/clipped_ratio",
    "entropy": "entropy",
    "clip_ratio/region_mean": "policy/clipfrac",
}


def schedulable(name: str) -> tuple[str, ...]:
    """The settings a group trainer reads every update: its KL weight, its clip range, the temperature."""
    return (f"{name}.beta", f"{name}.epsilon", "generation.temperature")


# --- the recipe ---


def config_fields(config_class: type) -> frozenset[str]:
    """The fields a TRL config dataclass takes."""
    return frozenset(f.name for f in dataclasses.fields(config_class) if f.init)


def field_default(config_class: type, name: str) -> Any:
    """A TRL config field's default, as the trainer reads it when a recipe leaves the field out."""
    field = next(f for f in dataclasses.fields(config_class) if f.name == name)
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def counterparts(config_class: type, kl_meaning: str) -> dict[str, Counterpart]:
    """The KL weight, clip range and epochs of a TRL group trainer under their TRL names and defaults,
    for `llm-rl migrate`."""
    return {
        "kl_coefficient": Counterpart("beta", field_default(config_class, "beta"), kl_meaning),
        "clip_range": Counterpart(
            "epsilon", field_default(config_class, "epsilon"), "the ratio clip of the policy loss"
        ),
        "epochs": Counterpart(
            "num_iterations",
            field_default(config_class, "num_iterations"),
            "passes over each batch of generations",
        ),
    }


def check_fields(name: str, section: dict[str, Any], config_class: type) -> None:
    """Every key of the section is a field of the TRL config."""
    fields = config_fields(config_class)
    for key in section:
        if key not in fields:
            raise RecipeError(
                f"{name}.{key}: not a field of TRL's {config_class.__name__}{did_you_mean(key, sorted(fields))}"
            )


def group_size(section: dict[str, Any], default: int) -> Any:
    """Completions per prompt (TRL's `num_generations`)."""
    return section.get("num_generations", default)


# The TRL fields `generation.backend` sets, and those `generation.batch_size` sets.
BACKEND_FIELDS = ("cache_implementation", "use_transformers_continuous_batching", "use_transformers_paged")
BATCH_FIELDS = ("generation_batch_size", "steps_per_generation")


def check_generation(recipe: Recipe, name: str) -> None:
    """`generation.backend` and `generation.batch_size` against the section's own TRL keys for the same
    thing, and the rollout batch against the training micro-batch.

    `generation.batch_size` is TRL's `generation_batch_size` per process: completions generated at once,
    which TRL then trains on in `generation.batch_size / training.per_device_batch_size` micro-batches
    (its `steps_per_generation`), so it must hold whole micro-batches.
    """
    section, generation = recipe.section(name), recipe.generation
    if generation.backend != "auto":
        for key in BACKEND_FIELDS:
            if key in section:
                raise RecipeError(f"generation.backend and {name}.{key} both set: keep generation.backend")
    if generation.batch_size is None:
        return
    for key in BATCH_FIELDS:
        if key in section:
            raise RecipeError(f"generation.batch_size and {name}.{key} both set: keep generation.batch_size")
    micro = recipe.training.per_device_batch_size
    if generation.batch_size % micro:
        raise RecipeError(
            f"generation.batch_size ({generation.batch_size}) must be a multiple of training.per_device_batch_size "
            f"({micro}): TRL trains on each generated batch in whole micro-batches"
        )


def check_batches(recipe: Recipe, name: str, default_group: int) -> None:
    """The group needs two completions at least, and the generation batch must hold whole groups."""
    section = recipe.section(name)
    group = group_size(section, default_group)
    if not isinstance(group, int) or group < 2:
        raise RecipeError(
            f"{name}.num_generations: must be an integer of at least 2 (advantages are relative to the group)"
        )
    processes = world_size()
    batch = section.get("generation_batch_size") or generation_batch(recipe, name) * processes
    if batch % group:
        raise RecipeError(
            f"{name}.num_generations: the generation batch of {batch} completions (generation.batch_size, or "
            f"training.per_device_batch_size x steps per generation, x {processes} processes) is not "
            f"a multiple of the group size {group}; each prompt's {group} completions must be generated together"
        )


def check_schedules(recipe: Recipe, name: str) -> None:
    """A scheduled KL weight must start above 0."""
    beta = recipe.schedules.get(f"{name}.beta")
    if beta is not None and beta.value_at(0) <= 0:
        raise RecipeError(
            f"schedules.{name}.beta: must start above 0: {name.upper()} builds its reference model only when "
            "beta is above 0 at the start"
        )


def check_importance_sampling(recipe: Recipe, name: str, config_class: type) -> None:
    """`generation.vllm.importance_sampling` is a setting of TRL's GRPO alone."""
    if recipe.generation.vllm.importance_sampling is not None and not has_importance_sampling(config_class):
        raise RecipeError(
            f"generation.vllm.importance_sampling: {no_importance_sampling(config_class)}; "
            f"remove the key for {name}"
        )


def has_importance_sampling(config_class: type) -> bool:
    """Whether the TRL config corrects for the engine's sampling probabilities (GRPO's does, RLOO's not)."""
    return "vllm_importance_sampling_correction" in config_fields(config_class)


def no_importance_sampling(config_class: type) -> str:
    """Why a TRL config without the correction takes none of its settings."""
    return (
        f"TRL's {config_class.__name__} has no importance-sampling correction for the engine's sampling "
        "probabilities"
    )


# --- a run ---


def samples_per_step(recipe: Recipe, name: str) -> int:
    """New prompt-completion pairs per optimizer update, over all processes.

    Each update trains on `per_device_batch_size x gradient_accumulation_steps` completions per process;
    with `num_iterations` > 1 each generated completion is trained on that many times.
    """
    training = recipe.training
    per_update = training.per_device_batch_size * training.gradient_accumulation_steps * world_size()
    return max(1, per_update // recipe.section(name).get("num_iterations", 1))


def trainer_config(
    recipe: Recipe, name: str, config_class: type, advantage_fields: dict[str, Any]
) -> TrainingArguments:
    """The TRL config for a recipe: shared sections first, then the advantage settings, then the
    recipe's own section, then the scheduled settings at their start."""
    generation = recipe.generation
    schedules = schedulable(name)
    fields: dict[str, Any] = shared_training_args(recipe, samples_per_step(recipe, name))
    fields.update(
        max_completion_length=generation.max_new_tokens,
        temperature=generation.temperature,
        top_p=generation.top_p,
        # Unset is TRL's 0 (no top-k): None would let transformers fill in the model's own (50 by default).
        top_k=generation.top_k or 0,
        reward_weights=[entry.weight for entry in recipe.rewards],
        trust_remote_code=recipe.model.trust_remote_code,
        **generation_fields(recipe, config_class),
    )
    fields.update(advantage_fields)
    fields.update(recipe.section(name))
    fields.update(start_values(recipe, schedules))
    if generation.min_new_tokens is not None:
        fields["generation_kwargs"] = {
            "min_new_tokens": generation.min_new_tokens,
            **(fields.get("generation_kwargs") or {}),
        }
    try:
        return config_class(**fields)
    except (ValueError, TypeError) as err:
        raise RecipeError(f"{name}: TRL's {config_class.__name__} rejects these settings: {err}") from None


def generation_fields(recipe: Recipe, config_class: type) -> dict[str, Any]:
    """TRL's fields for `generation.backend` and `generation.batch_size`.

    `static` is TRL's `cache_implementation`; TRL builds its `GenerationConfig` with compilation off, so
    `build_trainer` turns transformers' compiled generation on afterwards (`compiled_generation`).
    `paged` is TRL's `use_transformers_continuous_batching`. `vllm` is TRL's vLLM settings (`vllm_fields`).
    """
    generation = recipe.generation
    fields: dict[str, Any] = {}
    backend = resolve_backend(generation.backend)
    if backend == "static":
        fields["cache_implementation"] = "static"
    elif backend == "paged":
        fields["use_transformers_continuous_batching"] = True
    elif backend == "vllm":
        fields.update(vllm_fields(recipe, config_class))
    if generation.batch_size is not None:
        fields["generation_batch_size"] = generation.batch_size * world_size()
    return fields


def vllm_fields(recipe: Recipe, config_class: type) -> dict[str, Any]:
    """`generation.vllm` under TRL's names.

    In server mode TRL's own vLLM generation runs (`use_vllm`). A colocated engine is llm_rl's: the trainer
    is built without one, and `build_trainer` attaches it (`attach_colocated_vllm`).
    """
    section = recipe.generation.vllm
    fields: dict[str, Any] = {
        "use_vllm": section.mode == "server",
        "vllm_mode": section.mode,
        "vllm_gpu_memory_utilization": section.gpu_memory_utilization,
        "vllm_tensor_parallel_size": section.tensor_parallel_size,
        "vllm_enable_sleep_mode": section.sleep_mode,
        "vllm_max_model_length": section.max_model_length,
        "vllm_server_base_url": section.server_base_url,
        "vllm_server_host": section.server_host,
        "vllm_server_port": section.server_port,
        "vllm_server_timeout": section.server_timeout,
        "vllm_group_port": section.group_port,
    }
    if section.importance_sampling is not None:
        fields["vllm_importance_sampling_correction"] = section.importance_sampling
    known = config_fields(config_class)
    return {key: value for key, value in fields.items() if key in known}


def colocated_vllm(recipe: Recipe) -> bool:
    """Whether the run generates on vLLM engines inside the training processes."""
    generation = recipe.generation
    return resolve_backend(generation.backend) == "vllm" and generation.vllm.mode == "colocate"


def attach_colocated_vllm(trainer: Trainer, components: Components) -> None:
    """TRL's vLLM generation on llm_rl's colocated engine (`llm_rl.generation.vllm_engine`), in a TRL group
    trainer built without vLLM: the arguments TRL 1.16's GRPOTrainer and RLOOTrainer give their
    `VLLMGeneration`, then the switches their generation step reads (`use_vllm`, and the update whose
    weights the engine holds: -1, none yet, so that the first generation pushes them)."""
    from llm_rl.generation.vllm_engine import ColocatedVLLM
    from llm_rl.generation.vllm_settings import engine_settings
    from llm_rl.models.load import resolve_model_path

    recipe, args = components.recipe, trainer.args
    tokenizer = recipe.model.tokenizer
    engine = engine_settings(
        recipe,
        components.policy_path,
        resolve_model_path(tokenizer, needs_config=False, key="model.tokenizer") if tokenizer else None,
    )
    trainer.vllm_generation = ColocatedVLLM(
        engine,
        model=trainer.model,
        accelerator=trainer.accelerator,
        processing_class=trainer.processing_class,
        structured_outputs_regex=args.vllm_structured_outputs_regex,
        tensor_parallel_size=engine.tensor_parallel_size,
        gpu_memory_utilization=engine.gpu_memory_utilization,
        max_model_length=engine.max_model_length,
        max_num_seqs=args.per_device_train_batch_size
        * engine.tensor_parallel_size
        * args.steps_per_generation,
        enable_sleep_mode=engine.sleep_mode,
        model_impl=args.vllm_model_impl,
        trust_remote_code=engine.trust_remote_code,
        repetition_penalty=trainer.repetition_penalty,
        temperature=trainer.temperature,
        top_p=trainer.top_p,
        top_k=trainer.top_k,
        min_p=trainer.min_p,
        max_completion_length=trainer.max_completion_length,
        logprobs=0,
        generation_kwargs=args.generation_kwargs,
    )
    trainer.use_vllm = args.use_vllm = True
    trainer._last_loaded_step = -1


def compiled_generation(trainer: Trainer, recipe: Recipe) -> None:
    """Turn on transformers' compiled generation in a TRL trainer built with `cache_implementation: static`.

    TRL 1.16 builds its `GenerationConfig(..., disable_compile=True)` whatever the cache; a static cache
    without compilation is the slow half of the backend.
    """
    backend = resolve_backend(recipe.generation.backend)
    config = getattr(trainer, "generation_config", None)
    if backend == "static" and config is not None:
        with_backend(config, backend)


def sized_paged_cache(trainer: Trainer, components: Components) -> None:
    """Size the paged cache of a TRL trainer built with continuous batching (`paged`) to its rollouts.

    TRL 1.16 lets transformers size it to half the free memory, which on a CPU is half the host's RAM.
    TRL generates a process's whole share of the generation batch in one call.
    """
    recipe = components.recipe
    if not getattr(trainer, "use_transformers_continuous_batching", False):
        return
    if recipe.section(recipe.algorithm).get("transformers_continuous_batching_config"):
        return  # the recipe sized it itself
    trainer.continuous_batching_config = paged_cache_config(
        requests=trainer.args.generation_batch_size // trainer.accelerator.num_processes,
        longest_prompt=longest_prompt(
            components.data.train, recipe.data.max_prompt_length, components.tokenizer
        ),
        max_new_tokens=recipe.generation.max_new_tokens,
    )


def check_router_aux_loss(recipe: Recipe, name: str, policy: PreTrainedModel) -> None:
    """`router_aux_loss_coef` only weighs a Mixture-of-Experts router loss.

    Since TRL 1.14 the key defaults to the model's own coefficient, and a value set for a model without
    router logits stops the trainer at start-up; until then its default (0.001) was ignored for dense
    models, so recipes written then may carry it.
    """
    coef = recipe.section(name).get("router_aux_loss_coef")
    if coef and not hasattr(policy.config.get_text_config(), "output_router_logits"):
        raise RecipeError(
            f"{name}.router_aux_loss_coef is {coef}, but {type(policy).__name__} is not a Mixture-of-Experts "
            "model with router logits, so there is no load-balancing loss to weigh: remove the key"
        )


class GroupMetrics(StagedCheckpoints):
    """Mixed into a TRL group trainer: the held-out reward joined to its log rows, the mean
    within-group reward spread (`reward/group_std`) and the group size (`group_size`: it can change
    between stages).

    TRL logs the spread over the whole batch; the spread inside each prompt's group is what the
    advantages are made of, so a group spread near zero means no learning signal. Checkpoints are
    staged, then completed by `llm_rl.training.checkpoints.CheckpointManager`.
    """

    def __init__(self, *args: Any, held_out: HeldOutReward | None = None, **kwargs: Any) -> None:
        """The TRL trainer's arguments, plus the held-out reward evaluator (`evaluation.every`)."""
        self.held_out = held_out
        super().__init__(*args, **kwargs)
        if held_out is not None and held_out.at_start:
            self.add_callback(EvaluateAtStart(self, held_out))

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """A training log, with the held-out reward joined to it on evaluation updates."""
        if self.held_out is not None and "loss" in logs and self.held_out.due(self.state.global_step):
            held_out = self.held_out(self.model_wrapped, self.accelerator, engine=self.rollout_engine())
            logs = {**logs, **held_out}
        super().log(logs, start_time)

    def rollout_engine(self) -> Any:
        """The colocated vLLM engine the trainer generates with (evaluation borrows it), or None."""
        if getattr(self, "use_vllm", False) and self.vllm_mode == "colocate":
            return self.vllm_generation
        return None

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        weights = self.reward_weights.to(rewards_per_func.device)
        rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        mode = "train" if self.model.training else "eval"
        group = self.num_generations if mode == "train" else self.num_generations_eval
        spread = rewards.view(-1, group).std(dim=1, unbiased=False).mean()
        self._metrics[mode]["reward/group_std"].append(float(spread))
        self._metrics[mode]["group_size"].append(group)
        return rewards_per_func


@functools.cache
def with_group_metrics(trainer_class: type[Trainer]) -> type[Trainer]:
    """`trainer_class` with `GroupMetrics` mixed in (one class per TRL trainer)."""
    return type(f"Unified{trainer_class.__name__}", (GroupMetrics, trainer_class), {})


def build_trainer(
    components: Components, callbacks: list[TrainerCallback], trainer_class: type[Trainer], config: Any
) -> Trainer:
    """A ready-to-train TRL group trainer over the recipe's prompts and reward functions."""
    from llm_rl.models.lora import peft_config

    trainer = with_group_metrics(trainer_class)(
        model=components.policy,
        reward_funcs=list(components.rewards.functions),
        args=config,
        train_dataset=components.data.train,
        processing_class=components.tokenizer,
        callbacks=callbacks,
        peft_config=peft_config(components.recipe.model.lora),
        held_out=components.held_out,
    )
    compiled_generation(trainer, components.recipe)
    sized_paged_cache(trainer, components)
    if colocated_vllm(components.recipe):
        attach_colocated_vllm(trainer, components)
    return trainer


def apply_setting(trainer: Any, name: str, key: str, value: float) -> None:
    """Set a scheduled setting where the TRL trainer reads it each update.

    The trainer copies these from its config once, at start-up, so the copies are what change.
    """
    if key == f"{name}.beta":
        trainer.beta = value
    elif key == f"{name}.epsilon":
        trainer.epsilon_low = value
        if trainer.args.epsilon_high is None:
            trainer.epsilon_high = value
    elif key == "generation.temperature":
        # TRL samples with transformers' generation config, or with vLLM's copy of the setting.
        trainer.temperature = value
        if getattr(trainer, "generation_config", None) is not None:
            trainer.generation_config.temperature = value
        if getattr(trainer, "use_vllm", False):
            trainer.vllm_generation.temperature = value
    else:
        raise KeyError(key)


# --- `llm-rl plan`, `doctor` and `migrate` ---


def generation_batch(recipe: Recipe, name: str) -> int:
    """Sequences generated at once on one GPU: `generation.batch_size`, or a micro-batch for each step of a
    generation."""
    training = recipe.training
    if recipe.generation.batch_size is not None:
        return recipe.generation.batch_size
    return training.per_device_batch_size * (
        recipe.section(name).get("steps_per_generation") or training.gradient_accumulation_steps
    )


def zero_spread_hint(series: Series, name: str) -> tuple[str, str] | None:
    """Most groups gave all their completions one reward: they carry no advantage."""
    zero = series("reward/frac_zero_std")
    if not zero:
        return None
    share = sum(v for _, v in zero) / len(zero)
    if share <= 0.5:
        return None
    return (
        f"{share:.0%} of groups had one reward for all their completions (reward/frac_zero_std)",
        f"those groups carry no advantage: raise {name}.num_generations or generation.temperature, or add a "
        "denser reward (partial credit, a format term)",
    )


def shared_overrides(config_class: type) -> dict[str, SharedOverride]:
    """The shared settings a migrated recipe cannot keep for a TRL group trainer: the importance-sampling
    switch, where its config has no such correction."""
    if has_importance_sampling(config_class):
        return {}
    return {"generation.vllm.importance_sampling": SharedOverride(None, no_importance_sampling(config_class))}


def missing_importance_sampling(config_class: type) -> dict[str, str]:
    """GRPO's importance-sampling settings (`IMPORTANCE_SAMPLING_FIELDS`) where the TRL config has no such
    correction, and why (none where it has)."""
    if has_importance_sampling(config_class):
        return {}
    return dict.fromkeys(IMPORTANCE_SAMPLING_FIELDS, no_importance_sampling(config_class))


def migrated_group(
    recipe: dict[str, Any], section: dict[str, Any], name: str, largest: int
) -> list[tuple[str, Any, str]]:
    """A group size for a recipe that comes from an algorithm without groups: the largest up to
    `largest` that divides an update's batch."""
    if "num_generations" in section:
        return []
    training = recipe.get("training") or {}
    batch = training.get("per_device_batch_size", 8) * training.get("gradient_accumulation_steps", 1)
    group = max((g for g in range(2, largest + 1) if batch % g == 0), default=None)
    if group is None:
        raise RecipeError(
            f"training.per_device_batch_size x gradient_accumulation_steps is {batch}: {name.upper()} needs it "
            "to hold whole groups of at least 2 completions",
        )
    section["num_generations"] = group
    return [("num_generations", group, f"{batch // group} prompts x {group} completions per update")]


def finish_from_checkpoint(trainer: Trainer, checkpoint: Path) -> None:
    """The checkpoint's policy and counters, without `Trainer.train`: resumed at its budget, transformers'
    loop would take one more update before it checks `max_steps`."""
    from transformers import TrainerState
    from transformers.trainer import TRAINER_STATE_NAME

    load_weights(trainer.model, checkpoint)
    trainer.state = TrainerState.load_from_json(str(checkpoint / TRAINER_STATE_NAME))
