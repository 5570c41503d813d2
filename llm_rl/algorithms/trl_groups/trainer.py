"""A TRL group trainer built from components: llm_rl's metrics and held-out reward mixed in, the
generation backends switched on, and a vLLM engine colocated in the training processes.

The TRL trainer classes are imported only when a trainer is built, so that the tools that ask an
algorithm about a recipe never load one.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from llm_rl.algorithms.trl_groups.group_spread import (
    RewardLog,
    mean_group_spread,
    rollouts_in_global_order,
    weighted_rewards,
)
from llm_rl.data.prompts import longest_prompt
from llm_rl.generation.backends import resolve_backend, with_backend
from llm_rl.generation.transformers_generators import paged_cache_config
from llm_rl.schema import Recipe
from llm_rl.training.checkpoint_files import load_weights
from llm_rl.training.checkpoints import StagedCheckpoints
from llm_rl.training.evaluation import EvaluateAtStart, HeldOutReward

if TYPE_CHECKING:
    from transformers import Trainer, TrainerCallback

    from llm_rl.algorithms.base import Components


def colocated_vllm(recipe: Recipe) -> bool:
    """Whether the run generates on vLLM engines inside the training processes."""
    generation = recipe.generation
    return resolve_backend(generation.backend) == "vllm" and generation.vllm.mode == "colocate"


def attach_colocated_vllm(trainer: Trainer, components: Components) -> None:
    """TRL's vLLM generation on llm_rl's colocated engine (`llm_rl.generation.vllm_engine`), in a TRL group
    trainer built without vLLM: the arguments TRL 1.16's GRPOTrainer and RLOOTrainer give their
    `VLLMGeneration`, then the switches their generation step reads (`use_vllm`, and the update whose
    weights the engine holds: -1, none yet, so that the first generation pushes them)."""
    from llm_rl.generation.vllm_engine.colocated import ColocatedVLLM
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


class GroupMetrics(StagedCheckpoints):
    """Mixed into a TRL group trainer: the held-out reward joined to its log rows, the mean
    within-group reward spread (`reward/group_std`, `group_spread`) and the group size (`group_size`:
    it can change between stages). Checkpoints are staged, then completed by
    `llm_rl.training.checkpoints.CheckpointManager`.
    """

    def __init__(
        self,
        *args: Any,
        held_out: HeldOutReward | None = None,
        reward_log: RewardLog | None = None,
        **kwargs: Any,
    ) -> None:
        """The TRL trainer's arguments, plus the held-out reward evaluator (`evaluation.every`) and the
        log its reward functions write to (`build_trainer` wraps them)."""
        self.held_out = held_out
        self.reward_log = reward_log
        super().__init__(*args, **kwargs)
        if held_out is not None and held_out.at_start:
            self.add_callback(EvaluateAtStart(self, held_out))

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """A training log, with the groups' reward spread, and the held-out reward on evaluation updates.

        Every process logs the same updates, so the collectives here are matched."""
        if "loss" in logs:
            logs = {**logs, **self.group_metrics()}
            if self.held_out is not None and self.held_out.due(self.state.global_step):
                held_out = self.held_out(self.model_wrapped, self.accelerator, engine=self.rollout_engine())
                logs = {**logs, **held_out}
        super().log(logs, start_time)

    def group_metrics(self) -> dict[str, float]:
        """The mean spread inside the groups scored since the last log, over all processes' completions
        (a group may span processes), and the group size; nothing when no rollout was scored."""
        kept = self.reward_log.take() if self.reward_log is not None else None
        if kept is None:
            return {}
        gathered = self.accelerator.gather(kept.to(self.accelerator.device)).cpu()
        rollouts = rollouts_in_global_order(gathered, self.accelerator.num_processes)
        weights = torch.tensor(self.args.reward_weights or [1.0] * rollouts.shape[-1], dtype=torch.float32)
        group = self.args.num_generations
        rewards = weighted_rewards(rollouts.reshape(-1, rollouts.shape[-1]), weights)
        return {"reward/group_std": mean_group_spread(rewards, group), "group_size": float(group)}

    def rollout_engine(self) -> Any:
        """The colocated vLLM engine the trainer generates with (evaluation borrows it), or None."""
        if getattr(self, "use_vllm", False) and self.vllm_mode == "colocate":
            return self.vllm_generation
        return None


@functools.cache
def with_group_metrics(trainer_class: type[Trainer]) -> type[Trainer]:
    """`trainer_class` with `GroupMetrics` mixed in (one class per TRL trainer)."""
    return type(f"Unified{trainer_class.__name__}", (GroupMetrics, trainer_class), {})


def build_trainer(
    components: Components, callbacks: list[TrainerCallback], trainer_class: type[Trainer], config: Any
) -> Trainer:
    """A ready-to-train TRL group trainer over the recipe's prompts and reward functions."""
    from llm_rl.models.lora import peft_config

    functions = components.rewards.functions
    reward_log = RewardLog(len(functions))
    trainer = with_group_metrics(trainer_class)(
        model=components.policy,
        reward_funcs=[reward_log.record(index, function) for index, function in enumerate(functions)],
        args=config,
        train_dataset=components.data.train,
        processing_class=components.tokenizer,
        callbacks=callbacks,
        peft_config=peft_config(components.recipe.model.lora),
        held_out=components.held_out,
        reward_log=reward_log,
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


def finish_from_checkpoint(trainer: Trainer, checkpoint: Path) -> None:
    """The checkpoint's policy and counters, without `Trainer.train`: resumed at its budget, transformers'
    loop would take one more update before it checks `max_steps`."""
    from transformers import TrainerState
    from transformers.trainer import TRAINER_STATE_NAME

    load_weights(trainer.model, checkpoint)
    trainer.state = TrainerState.load_from_json(str(checkpoint / TRAINER_STATE_NAME))
