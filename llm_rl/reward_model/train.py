"""Training a reward model with TRL's RewardTrainer from a YAML config (`reward_models/train.py`).

The base is a causal LM or sequence-classification folder (`builtin:tiny-arithmetic` for the embedded
one); it gets a one-output score head and learns Bradley-Terry preferences, chosen over rejected
(optionally by a margin). The run folder holds `config.yaml`, `final/` (a `save_pretrained` model and
tokenizer) and `reward_summary.json`. Held-out pairwise accuracy is measured by scoring the held-out
pairs with `final/` through the `reward_model` reward, exactly as an RL run will read it, so the folder
is checked to work as `rewards: [{name: reward_model, path: .../final}]`, as PPO's reward model and as
its critic's start (`ppo.value_model: reward_model`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError
from transformers import AutoModelForSequenceClassification, PreTrainedModel, set_seed

from llm_rl.errors import ModelError, RecipeError, first_line
from llm_rl.models.load import load_tokenizer, model_dtype, resolve_model_path, training_tokenizer
from llm_rl.recipe.files import read_recipe_file
from llm_rl.recipe.load import apply_override
from llm_rl.recipe.schema_errors import describe_validation_error
from llm_rl.reward_model.preferences import PreferenceDataSection, load_preferences
from llm_rl.rewards.reward_model import reward_model_reward
from llm_rl.run_folder import apply_umask, write_atomic
from llm_rl.schema import ModelSection, RunSection, Section, WandbSection
from llm_rl.training.args import device_args

FINAL_DIR = "final"
SUMMARY_FILE = "reward_summary.json"
CONFIG_FILE = "config.yaml"


class RewardModelBaseSection(Section):
    # A causal LM or sequence-classification folder, or builtin:tiny-arithmetic; a hub id online.
    base: str = "builtin:tiny-arithmetic"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    trust_remote_code: bool = False
    gradient_checkpointing: bool = False


class RewardTrainingSection(Section):
    learning_rate: float = Field(1e-5, ge=0.0)
    # One of epochs or max_steps (optimizer updates).
    epochs: float = Field(1.0, gt=0.0)
    max_steps: int | None = Field(None, gt=0)
    per_device_batch_size: int = Field(8, gt=0)
    gradient_accumulation_steps: int = Field(1, gt=0)
    # Pairs longer than this (tokens) are dropped, as TRL's RewardTrainer does.
    max_length: int | None = Field(1024, gt=0)
    lr_scheduler: str = "linear"
    warmup_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    weight_decay: float = Field(0.0, ge=0.0)
    max_grad_norm: float = Field(1.0, ge=0.0)
    # Pulls the mean reward towards 0 (TRL's center_rewards_coefficient); None: off.
    center_rewards_coefficient: float | None = Field(None, ge=0.0)
    precision: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    logging_steps: int = Field(10, gt=0)
    # Pairs per forward pass when scoring the held-out split.
    eval_batch_size: int = Field(64, gt=0)


class RewardMonitoringSection(Section):
    wandb: WandbSection = Field(default_factory=lambda: WandbSection(mode="disabled"))


class RewardModelRecipe(Section):
    """A reward-model training config (reward_models/configs/*.yaml)."""

    run: RunSection = Field(default_factory=lambda: RunSection(output_dir="runs/reward-model"))
    model: RewardModelBaseSection = Field(default_factory=RewardModelBaseSection)
    data: PreferenceDataSection = Field(default_factory=PreferenceDataSection)
    training: RewardTrainingSection = Field(default_factory=RewardTrainingSection)
    monitoring: RewardMonitoringSection = Field(default_factory=RewardMonitoringSection)

    @property
    def output_dir(self) -> Path:
        return Path(self.run.output_dir or "runs/reward-model")


def load_reward_recipe(path: Path | None, overrides: list[str]) -> RewardModelRecipe:
    """Read a config (None: the embedded default), apply `--set` overrides, validate it."""
    where = str(path) if path is not None else "<default reward-model config>"
    raw = read_recipe_file(path) if path is not None else {}
    for override in overrides:
        apply_override(raw, override, where)
    try:
        return RewardModelRecipe.model_validate(raw)
    except ValidationError as err:
        raise RecipeError(describe_validation_error(err, RewardModelRecipe), where=where) from None


def load_base_model(section: RewardModelBaseSection, precision: str) -> PreTrainedModel:
    """The base as a sequence classifier with one output (a new score head on a causal LM)."""
    path = resolve_model_path(section.base)
    try:
        return AutoModelForSequenceClassification.from_pretrained(
            path,
            num_labels=1,
            dtype=model_dtype(section.dtype, precision),
            trust_remote_code=section.trust_remote_code,
        )
    except Exception as err:
        raise ModelError(
            f"does not load as a sequence classifier: {first_line(err)}", where=section.base
        ) from None


def reward_config(recipe: RewardModelRecipe, staging: Path) -> Any:
    """TRL's RewardConfig from the recipe (checkpoints off: a run this short restarts rather than resumes)."""
    from trl import RewardConfig

    training = recipe.training
    wandb = recipe.monitoring.wandb
    if wandb.mode != "disabled":
        os.environ.setdefault("WANDB_PROJECT", wandb.project)
        os.environ.setdefault("WANDB_DIR", str(recipe.output_dir))
        if wandb.mode == "offline":
            os.environ["WANDB_MODE"] = "offline"
    return RewardConfig(
        output_dir=str(staging),
        run_name=recipe.run.name or recipe.output_dir.name,
        seed=recipe.run.seed,
        learning_rate=training.learning_rate,
        num_train_epochs=training.epochs,
        max_steps=training.max_steps or -1,
        per_device_train_batch_size=training.per_device_batch_size,
        per_device_eval_batch_size=training.eval_batch_size,
        gradient_accumulation_steps=training.gradient_accumulation_steps,
        max_length=training.max_length,
        lr_scheduler_type=training.lr_scheduler,
        warmup_steps=training.warmup_ratio,  # below 1: a share of the run (transformers 5)
        weight_decay=training.weight_decay,
        max_grad_norm=training.max_grad_norm,
        center_rewards_coefficient=training.center_rewards_coefficient,
        logging_steps=training.logging_steps,
        gradient_checkpointing=recipe.model.gradient_checkpointing,
        save_strategy="no",
        eval_strategy="no",
        report_to=["wandb"] if wandb.mode != "disabled" else "none",
        **device_args(training.precision),
    )


def pairwise_accuracy(final: Path, pairs: Any, batch_size: int) -> tuple[float, float]:
    """(share of held-out pairs scored chosen > rejected, mean score gap) through the `reward_model` reward."""
    score = reward_model_reward(path=str(final), batch_size=batch_size)
    prompts = pairs["prompt"] if "prompt" in pairs.column_names else [""] * len(pairs)
    chosen = score(prompts=prompts, completions=pairs["chosen"])
    rejected = score(prompts=prompts, completions=pairs["rejected"])
    wins = sum(c > r for c, r in zip(chosen, rejected, strict=True))
    gap = sum(c - r for c, r in zip(chosen, rejected, strict=True)) / len(chosen)
    return wins / len(chosen), gap


def train_reward_model(recipe: RewardModelRecipe) -> dict[str, Any]:
    """Train, save `final/`, measure held-out pairwise accuracy, write the summary; returns it."""
    from trl import RewardTrainer

    started = time.perf_counter()
    set_seed(recipe.run.seed)
    tokenizer = training_tokenizer(
        load_tokenizer(
            ModelSection(policy=recipe.model.base, trust_remote_code=recipe.model.trust_remote_code)
        )
    )
    train, held_out = load_preferences(recipe.data, recipe.run.seed)
    model = load_base_model(recipe.model, recipe.training.precision)
    model.config.pad_token_id = tokenizer.pad_token_id
    folder = recipe.output_dir
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / CONFIG_FILE, yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False))
    staging = folder / ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    trainer = RewardTrainer(
        model=model, args=reward_config(recipe, staging), train_dataset=train, processing_class=tokenizer
    )
    result = trainer.train()
    trainer.save_model(str(staging / FINAL_DIR))
    if trainer.is_world_process_zero():
        tokenizer.save_pretrained(str(staging / FINAL_DIR))
        apply_umask(staging / FINAL_DIR)
        final = folder / FINAL_DIR
        if final.exists():
            shutil.rmtree(final)
        (staging / FINAL_DIR).rename(final)
        shutil.rmtree(staging, ignore_errors=True)
        accuracy, gap = pairwise_accuracy(final, held_out, recipe.training.eval_batch_size)
        summary = {
            "held_out_pairwise_accuracy": accuracy,
            "held_out_mean_margin": gap,
            "held_out_pairs": len(held_out),
            "train_pairs": len(train),
            "steps": result.global_step,
            "train_loss": result.training_loss,
            "wall_seconds": round(time.perf_counter() - started, 2),
            "final": str(final),
        }
        write_atomic(folder / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
        return summary
    return {}
