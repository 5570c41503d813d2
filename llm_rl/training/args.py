"""The shared recipe sections mapped onto the `TrainingArguments` fields that both algorithms' trainers read.

Also picks the device settings itself when no GPU is present (DESIGN.md: CPU runs need `bf16=False`,
and multi-process CPU runs need `ddp_backend="gloo"`), so that users never have to.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch
from transformers import TrainingArguments

from llm_rl.errors import RecipeError
from llm_rl.monitoring.progress import bars_wanted
from llm_rl.schema import Recipe

# accelerate reads DeepSpeed's `gradient_clipping` from this variable (set by `accelerate launch`).
DEEPSPEED_CLIPPING_VARIABLE = "ACCELERATE_GRADIENT_CLIPPING"


def world_size() -> int:
    """Processes in this run, as set by `accelerate launch` or torchrun (1 for a plain python run)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


@contextlib.contextmanager
def assumed_world_size(processes: int) -> Iterator[None]:
    """Checks and batch arithmetic as a run of `processes` processes would see them (`llm-rl migrate
    --processes`), without launching one."""
    before = os.environ.get("WORLD_SIZE")
    os.environ["WORLD_SIZE"] = str(processes)
    try:
        yield
    finally:
        if before is None:
            del os.environ["WORLD_SIZE"]
        else:
            os.environ["WORLD_SIZE"] = before


def is_main_process() -> bool:
    """Rank 0 writes the run folder; other ranks only train."""
    return int(os.environ.get("RANK", "0")) == 0


def under_deepspeed() -> bool:
    """True when `accelerate launch` was given a DeepSpeed config."""
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"


def device_args(precision: str) -> dict[str, Any]:
    """Precision and backend settings for this machine."""
    has_gpu = torch.cuda.is_available()
    if precision == "auto":
        precision = "bf16" if has_gpu and torch.cuda.is_bf16_supported() else "fp32"
    args: dict[str, Any] = {"bf16": precision == "bf16", "fp16": precision == "fp16"}
    if not has_gpu:
        # DeepSpeed on CPU runs on its own `cpu` accelerator: `use_cpu` would bypass it.
        args["use_cpu"] = not under_deepspeed()
        if world_size() > 1:
            args["ddp_backend"] = "gloo"
    return args


def sync_deepspeed_clipping(max_grad_norm: float | None) -> None:
    """Under DeepSpeed, make the engine clip at `training.max_grad_norm` (None or 0: no clipping).

    DeepSpeed clips inside its own step, at its config's `gradient_clipping`. When the accelerate or
    DeepSpeed config leaves it unset (`auto`), accelerate would put 1.0 there whatever the recipe says:
    the recipe's goes in through the variable that accelerate reads. A value the config does set must
    agree with the recipe's.
    """
    if not under_deepspeed():
        return
    from accelerate.utils import DeepSpeedPlugin

    wanted = float(max_grad_norm or 0.0)
    configured = DeepSpeedPlugin().deepspeed_config.get("gradient_clipping")
    if configured == "auto":
        os.environ[DEEPSPEED_CLIPPING_VARIABLE] = str(wanted)
        return
    if float(configured or 0.0) != wanted:
        ours = max_grad_norm if max_grad_norm else "null (no clipping)"
        theirs = (
            "no gradient_clipping (no clipping)" if configured is None else f"gradient_clipping: {configured}"
        )
        raise RecipeError(
            f"training.max_grad_norm is {ours} but the DeepSpeed config has {theirs}; DeepSpeed "
            "clips at its own value, so make them agree or set gradient_clipping to auto there"
        )


def deepspeed_config_sections(*names: str) -> list[str]:
    """Which of these top-level sections the launch's DeepSpeed config sets (none without DeepSpeed)."""
    if not under_deepspeed():
        return []
    from accelerate.utils import DeepSpeedPlugin

    config = DeepSpeedPlugin().deepspeed_config
    return [name for name in names if name in config]


# (trainer state, log) -> prompt-completion pairs consumed so far.
SampleCounter = Callable[[Any, dict[str, Any]], int]


def sample_counter(samples_per_step: int) -> SampleCounter:
    """Samples so far for an algorithm that consumes `samples_per_step` pairs per optimizer update."""

    def count(state: Any, logs: dict[str, Any]) -> int:
        return state.global_step * samples_per_step

    return count


def steps_for_budget(recipe: Recipe, samples_per_step: int) -> int:
    """Optimizer updates for the recipe's budget: `training.max_steps`, or `total_samples` rounded up."""
    training = recipe.training
    if training.max_steps is not None:
        return training.max_steps
    if training.total_samples is not None:
        return math.ceil(training.total_samples / samples_per_step)
    return math.ceil(10_000 / samples_per_step)


def save_every_steps(recipe: Recipe, samples_per_step: int) -> int:
    """`checkpointing.every` in optimizer updates."""
    every = recipe.checkpointing.every
    if recipe.checkpointing.unit == "steps":
        return every
    return max(1, math.ceil(every / samples_per_step))


def checkpointing_field() -> str:
    """The TrainingArguments name of activation checkpointing (`gradient_checkpointing` before transformers 5)."""
    names = {field.name for field in dataclasses.fields(TrainingArguments)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


def shared_training_args(recipe: Recipe, samples_per_step: int) -> dict[str, Any]:
    """TrainingArguments fields set from the shared sections; each trainer builder adds its own.

    Under DeepSpeed this also sets the engine's clipping from the recipe (`sync_deepspeed_clipping`).
    """
    training = recipe.training
    max_steps = steps_for_budget(recipe, samples_per_step)
    if training.logging_steps > max_steps:
        raise RecipeError(
            f"training.logging_steps ({training.logging_steps}) is more than the run's {max_steps} updates: "
            "it would write no metric row; lower it or raise the budget"
        )
    sync_deepspeed_clipping(training.max_grad_norm)
    return {
        "output_dir": str(recipe.output_dir),
        "run_name": recipe.run_name,
        "seed": recipe.run.seed,
        "learning_rate": training.learning_rate,
        "max_steps": max_steps,
        "per_device_train_batch_size": training.per_device_batch_size,
        "gradient_accumulation_steps": training.gradient_accumulation_steps,
        "lr_scheduler_type": training.lr_scheduler,
        "warmup_steps": math.ceil(training.warmup_ratio * max_steps),
        "weight_decay": training.weight_decay,
        "max_grad_norm": training.max_grad_norm or 0.0,
        "logging_steps": training.logging_steps,
        checkpointing_field(): recipe.model.gradient_checkpointing,
        "save_strategy": "steps",
        "save_steps": save_every_steps(recipe, samples_per_step),
        # Rotation is llm_rl's own (checkpoints.CheckpointManager), which also keeps the best checkpoint.
        "save_total_limit": None,
        # Metrics reach wandb and TensorBoard through our own callback, under the unified names.
        "report_to": "none",
        "disable_tqdm": not bars_wanted(recipe.monitoring.progress),
        **device_args(training.precision),
    }
