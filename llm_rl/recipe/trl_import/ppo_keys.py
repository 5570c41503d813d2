"""TRL's PPO keys by what becomes of them (one key of ours, the ppo: section, not used), TRL 1.12's
defaults, and the keys that tell a TRL PPO run apart or mark a refused legacy one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llm_rl.errors import RecipeError
from llm_rl.recipe.trl_import.shared_args import FLAT_NOT_USED

# PPOConfig's own maths and rollout settings, which llm_rl's ppo: section keeps under TRL's names.
PPO_SECTION_KEYS = (
    "num_ppo_epochs", "kl_coef", "kl_estimator", "cliprange", "cliprange_value", "vf_coef", "gamma", "lam",
    "whiten_rewards", "missing_eos_penalty", "stop_token_id", "local_rollout_forward_batch_size",
    "dataset_num_proc", "ds3_gather_for_generation",
)  # fmt: skip

# TRL 1.12's defaults (trl/experimental/ppo/ppo_config.py and its TrainingArguments overrides) that a
# run relied on where it did not set them; each goes where the key itself would (`default_target`).
TRL_PPO_DEFAULTS: dict[str, Any] = {
    "learning_rate": 3e-6,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "lr_scheduler_type": "linear",
    "seed": 42,
    "response_length": 53,
    "temperature": 0.7,
    "num_ppo_epochs": 4,
    "kl_coef": 0.05,
    "local_rollout_forward_batch_size": 64,
}
# TRL 1.12's PPOConfig default for both model paths.
TRL_DEFAULT_MODEL = "EleutherAI/pythia-160m"

# Keys of TrainingArguments and the scripts whose meaning is one key of ours.
SHARED_KEYS = {
    "learning_rate": "training.learning_rate",
    "per_device_train_batch_size": "training.per_device_batch_size",
    "gradient_accumulation_steps": "training.gradient_accumulation_steps",
    "lr_scheduler_type": "training.lr_scheduler",
    "warmup_ratio": "training.warmup_ratio",
    "weight_decay": "training.weight_decay",
    "seed": "run.seed",
    "output_dir": "run.output_dir",
    "run_name": "run.name",
    "total_episodes": "training.total_samples",
    "response_length": "generation.max_new_tokens",
    "temperature": "generation.temperature",
    "save_total_limit": "checkpointing.keep_last",
    "attn_implementation": "model.attn_implementation",
    "use_peft": "model.lora.enabled",
    "lora_r": "model.lora.r",
    "lora_alpha": "model.lora.alpha",
    "lora_dropout": "model.lora.dropout",
    "lora_target_modules": "model.lora.target_modules",
    "dataset_name": "data.source",
    "dataset_config": "data.config",
    "dataset_train_split": "data.split",
}

# What TRL's PPO did with a key that llm_rl either does differently or does not need, and why.
PPO_NOT_USED = {
    "max_steps": "TRL's PPOTrainer ignored max_steps: its budget was total_episodes (training.total_samples)",
    "num_sample_generations": (
        "TRL printed a table of sample completions during training; see them with `llm-rl sample RUN_DIR`"
    ),
    "eval_strategy": (
        "TRL's PPOTrainer never evaluated: the eval split only fed its sample tables. llm_rl measures "
        "held-out reward when evaluation.every is set"
    ),
    "eval_steps": "TRL's PPOTrainer never evaluated (see eval_strategy)",
    "dataset_test_split": "TRL's PPOTrainer never evaluated (see eval_strategy); data.eval_split names one",
    "model_adapter_name": "PEFT adapters by name in one model: llm_rl's LoRA policy is its own reference "
    "with the adapters off",
    "ref_adapter_name": "PEFT adapters by name in one model: llm_rl's LoRA policy is its own reference "
    "with the adapters off",
    "dataset_streaming": "llm_rl reads the whole dataset before training (no streaming)",
    "sanity_check": "trl 0.9's 1,000 rows a split: data.limit keeps that many rows",
    "exp_name": "TRL named its runs exp_name__seed__time (until 0.27): run.name names llm_rl's run",
    **FLAT_NOT_USED,
}

# Script flags of public PPO projects that name data or prompt formatting: where their meaning goes.
DATA_LIKE_FLAGS = ("data", "file", "template", "prompt", "column")


# Keys only TRL's PPO runs have (PPOConfig's own, the scripts' model paths, trl 0.9-0.10's names).
PPO_ONLY_KEYS = {
    "sft_model_path", "reward_model_path", "total_episodes", "num_ppo_epochs", "response_length",
    "missing_eos_penalty", "non_eos_penalty", "local_rollout_forward_batch_size", "vf_coef",
    "cliprange_value", "whiten_rewards", "kl_estimator", "stop_token", "num_sample_generations",
}  # fmt: skip
LEGACY_KEYS = {"model_name", "steps", "ppo_epochs", "init_kl_coef", "adap_kl_ctrl", "query_dataset"}

# TRL 1.12's PPOConfig fields and trl 0.9-0.10's PPOv2Config additions, by type (the PPO trainer is gone
# from the TRL this project installs, so its fields are written here).
PPO_FIELD_TYPES: dict[str, Any] = {
    **dict.fromkeys(
        ("learning_rate", "temperature", "missing_eos_penalty", "kl_coef", "cliprange", "vf_coef",
         "cliprange_value", "gamma", "lam"),
        float,
    ),
    **dict.fromkeys(
        ("dataset_num_proc", "num_mini_batches", "total_episodes", "local_rollout_forward_batch_size",
         "num_sample_generations", "response_length", "stop_token_id", "num_ppo_epochs",
         "penalty_reward_value"),
        int,
    ),
    **dict.fromkeys(("whiten_rewards", "ds3_gather_for_generation", "non_eos_penalty", "push_to_hub"), bool),
    **dict.fromkeys(
        ("stop_token", "sft_model_path", "reward_model_path", "model_adapter_name", "ref_adapter_name",
         "kl_estimator", "exp_name"),
        str,
    ),
}  # fmt: skip


def is_trl_ppo(flat: dict[str, Any], script: str | None = None) -> bool:
    """Whether settings are a TRL PPO run's: PPO-only keys, or a script named for PPO."""
    return bool(PPO_ONLY_KEYS & set(flat)) or (script is not None and "ppo" in Path(script).stem.lower())


def trl_ppo_field_types() -> dict[str, Any]:
    """The types of a TRL PPO script's arguments: TrainingArguments, ModelConfig, ScriptArguments, PPOConfig."""
    from transformers import TrainingArguments
    from trl import ModelConfig, ScriptArguments

    from llm_rl.recipe.launch_command import field_types

    return {**field_types(TrainingArguments, ScriptArguments, ModelConfig), **PPO_FIELD_TYPES}


def check_not_legacy(flat: dict[str, Any], where: str) -> None:
    """The step()-API PPOConfig of trl 0.11 and before is refused, naming its keys."""
    legacy = sorted(LEGACY_KEYS & set(flat))
    if legacy:
        raise RecipeError(
            f"the step()-API PPOConfig of trl 0.11 and before ({', '.join(legacy)}): its adaptive KL "
            "controller has no counterpart; write its settings as a ppo: section of a recipe",
            where=where,
        )
