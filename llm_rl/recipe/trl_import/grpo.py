"""Flat TRL-style GRPO YAMLs (GRPOConfig fields at the top level, plus the script arguments
`model_name_or_path`, `dataset_name`, `reward_funcs`, ...) imported into our GRPO schema, each key
accounted for; `llm-rl migrate` then converts the result like one of our recipes."""

from __future__ import annotations

from typing import Any

from trl import GRPOConfig

from llm_rl.algorithms.registry import ALGORITHMS
from llm_rl.algorithms.trl_groups.config import field_default
from llm_rl.recipe.accounting import Migration, get, put
from llm_rl.recipe.trl_import.cadence import import_evaluation, import_resume, import_saving
from llm_rl.recipe.trl_import.data import DATA_KEYS, import_data
from llm_rl.recipe.trl_import.rewards import OPEN_R1_REWARD_NOTE, OPEN_R1_REWARD_SETTINGS, import_rewards
from llm_rl.recipe.trl_import.shared_args import (
    FLAT_NOT_USED,
    FLAT_SWITCHES,
    import_dtype,
    import_precision,
    import_reporting,
    import_switch,
)
from llm_rl.recipe.trl_import.vllm import OLD_VLLM_FIELD, OLD_VLLM_SETTINGS, VLLM_SETTINGS, import_vllm
from llm_rl.schema import SHARED_TRL_FIELDS, Recipe

# Script and model arguments of TRL's and open-r1's scripts -> our keys.
FLAT_KEYS = {
    "model_name_or_path": "model.policy",
    "trust_remote_code": "model.trust_remote_code",
    "attn_implementation": "model.attn_implementation",
    "gradient_checkpointing": "model.gradient_checkpointing",
    "use_peft": "model.lora.enabled",
    "lora_r": "model.lora.r",
    "lora_alpha": "model.lora.alpha",
    "lora_dropout": "model.lora.dropout",
    "lora_target_modules": "model.lora.target_modules",
    "dataset_prompt_column": "data.prompt_column",
    "system_prompt": "data.system_prompt",
    "per_device_eval_batch_size": "evaluation.batch_size",
    "wandb_project": "monitoring.wandb.project",
    "wandb_entity": "monitoring.wandb.entity",
    "wandb_run_group": "monitoring.wandb.group",
}

# Shared TRL fields that are not one key for one key: each has an import_* function of its own, or is not
# GRPOConfig's (total_episodes).
IMPORTED_APART = {"bf16", "fp16", "report_to", "save_steps", "total_episodes", "use_vllm", *VLLM_SETTINGS}

# TRL config fields our shared sections own -> our keys, for the flat file's top level.
FLAT_SHARED = {
    trl_name: ours
    for trl_name, ours in SHARED_TRL_FIELDS.items()
    if "[" not in ours and trl_name not in IMPORTED_APART
}

# Keys TRL has removed: the clear word the issue tracker keeps being asked for.
REMOVED_FROM_TRL = {
    "max_prompt_length": (
        "data.max_prompt_length",
        "removed from TRL's GRPOConfig (it no longer truncates prompts); llm_rl drops longer prompts "
        "and counts them",
    ),
    "vllm_guided_decoding_regex": (
        "grpo.vllm_structured_outputs_regex",
        "renamed in TRL to vllm_structured_outputs_regex",
    ),
    "wandb_log_unique_prompts": ("grpo.log_unique_prompts", "renamed in TRL to log_unique_prompts"),
}


def import_flat(flat: dict[str, Any]) -> Migration:
    """A flat TRL-style GRPO YAML as our GRPO recipe, each key accounted for."""
    grpo_fields = ALGORITHMS["grpo"].section_fields()
    out = Migration({"algorithm": "grpo"})
    handled = {
        "reward_funcs", "reward_weights", "reward_model_name_or_path", "bf16", "fp16", "report_to",
        "save_strategy", "save_steps", "resume_from_checkpoint", "eval_strategy", "evaluation_strategy",
        "eval_steps", "use_vllm", *VLLM_SETTINGS, *OLD_VLLM_SETTINGS, *DATA_KEYS,
    }  # fmt: skip
    import_data(flat, out)
    import_vllm(flat, out)
    import_rewards(flat, out)
    import_precision(flat, out)
    import_reporting(flat, out)
    import_saving(flat, out)
    import_resume(flat, out)
    import_evaluation(flat, out)
    import_trl_defaults(flat, out)
    for key, value in flat.items():
        if key in handled:
            continue
        if key in FLAT_KEYS:
            put(out.recipe, FLAT_KEYS[key], value)
            out.keep(key, value, FLAT_KEYS[key])
        elif key in ("torch_dtype", "dtype"):
            import_dtype(key, value, out)
        elif key in REMOVED_FROM_TRL:
            target, why = REMOVED_FROM_TRL[key]
            put(out.recipe, target, value)
            out.warn(key, value, why, target)
        elif key == "max_steps":
            if isinstance(value, int) and value > 0:
                put(out.recipe, "training.max_steps", value)
                out.keep(key, value, "training.max_steps")
            else:
                out.warn(key, value, "no step limit: give training.max_steps or training.total_samples")
        elif key in FLAT_SHARED:
            put(out.recipe, FLAT_SHARED[key], value)
            out.keep(key, value, FLAT_SHARED[key])
        elif key in FLAT_NOT_USED:
            out.warn(key, value, f"not used: {FLAT_NOT_USED[key]}")
        elif key in FLAT_SWITCHES:
            import_switch(key, value, out)
        elif key in OPEN_R1_REWARD_SETTINGS:
            out.warn(key, value, OPEN_R1_REWARD_NOTE)
        elif key in grpo_fields:
            put(out.recipe, f"grpo.{key}", value)
            out.keep(key, value, f"grpo.{key}")
        elif key.startswith("vllm_"):
            out.warn(key, value, OLD_VLLM_FIELD)
        else:
            out.warn(key, value, "not a field of TRL's GRPOConfig or of its scripts: not carried")
    return out


# GRPOConfig defaults that differ from llm_rl's and change what is learned or what fits in memory: a
# file that leaves them out ran with TRL's, so the recipe gets TRL's, each with a row.
CARRIED_TRL_DEFAULTS = ("max_completion_length", "lr_scheduler_type", "gradient_checkpointing")
# Defaults that differ too, for settings llm_rl owns as part of a run that is safe to leave running
# (logging every update, checkpoints by samples, keeping the last two, resuming its own folder): the
# recipe states llm_rl's value, and the row says what TRL would have done.
OWN_DEFAULTS = {
    "logging_steps": (
        "training.logging_steps",
        "llm_rl logs every update: alerts and early stopping read each row",
    ),
    "save_steps": ("checkpointing.every", "llm_rl checkpoints every 100,000 samples"),
    "save_total_limit": ("checkpointing.keep_last", "TRL keeps every checkpoint; llm_rl the last 2"),
    "resume_from_checkpoint": (
        "checkpointing.resume",
        "llm_rl resumes its own run folder's latest checkpoint",
    ),
}


def import_trl_defaults(flat: dict[str, Any], out: Migration) -> None:
    """A row and an explicit value for each GRPOConfig default the file relies on that differs from ours."""
    ours = Recipe().to_dict()
    for key in CARRIED_TRL_DEFAULTS:
        target = FLAT_SHARED[key]
        default = field_default(GRPOConfig, key)
        if key not in flat and default != get(ours, target):
            put(out.recipe, target, default)
            out.keep(
                f"{key} (TRL default)", default, target, f"llm_rl's own default is {get(ours, target)!r}"
            )
    for key, (target, why) in OWN_DEFAULTS.items():
        default = field_default(GRPOConfig, key)
        set_by_file = key in flat or (key == "save_steps" and "save_strategy" in flat)
        if not set_by_file and default != get(ours, target):
            put(out.recipe, target, get(ours, target))
            out.keep(f"{key} (TRL default)", default, target, f"kept llm_rl's {get(ours, target)!r}: {why}")
    if field_default(GRPOConfig, "max_steps") <= 0 and not {"max_steps", "num_train_epochs"} & set(flat):
        epochs = field_default(GRPOConfig, "num_train_epochs")
        out.warn("num_train_epochs (TRL default)", epochs, f"not used: {FLAT_NOT_USED['num_train_epochs']}")
