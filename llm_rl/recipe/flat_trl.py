"""Flat TRL-style GRPO YAMLs (GRPOConfig fields at the top level, plus the script arguments
`model_name_or_path`, `dataset_name`, `reward_funcs`, ...) imported into our GRPO schema, each key
accounted for; `llm-rl migrate` then converts the result like one of our recipes."""

from __future__ import annotations

import copy
from typing import Any

from llm_rl.algorithms.registry import ALGORITHMS
from llm_rl.errors import RecipeError
from llm_rl.recipe.accounting import Migration, put
from llm_rl.schema import SHARED_TRL_FIELDS

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
    "dataset_name": "data.source",
    "dataset_train_split": "data.split",
    "dataset_test_split": "data.eval_split",
    "dataset_prompt_column": "data.prompt_column",
    "system_prompt": "data.system_prompt",
    "per_device_eval_batch_size": "evaluation.batch_size",
    "wandb_project": "monitoring.wandb.project",
    "wandb_entity": "monitoring.wandb.entity",
}

# TRL config fields our shared sections own -> our keys, for the flat file's top level.
FLAT_SHARED = {
    trl_name: ours
    for trl_name, ours in SHARED_TRL_FIELDS.items()
    if "[" not in ours and trl_name not in {"bf16", "fp16", "report_to", "save_steps", "total_episodes"}
}

# Keys with nothing to carry into llm_rl, and why.
FLAT_NOT_USED = {
    "model_revision": "llm_rl loads the folder or the hub's default revision; pin a revision by downloading it",
    "push_to_hub": "llm_rl writes final/ locally; push it yourself",
    "hub_model_id": "llm_rl does not push to the hub",
    "hub_strategy": "llm_rl does not push to the hub",
    "hub_private_repo": "llm_rl does not push to the hub",
    "overwrite_output_dir": "llm_rl resumes from the run folder (checkpointing.resume); use a new run.output_dir",
    "log_level": "llm_rl prints one progress line per logging step",
    "logging_first_step": "metrics.jsonl holds every logging step",
    "logging_strategy": "llm_rl logs every training.logging_steps updates",
    "do_eval": "llm_rl evaluates when evaluation.every is set",
    "chat_template": (
        "a template string has no recipe key: put it in the model folder's tokenizer_config.json "
        "(chat_template); data.chat_template: true (the default) applies the tokenizer's template"
    ),
    "num_train_epochs": (
        "llm_rl's budget is training.max_steps or training.total_samples (epochs x prompts x completions); "
        "without one a run stops at 10,000 samples"
    ),
    "gradient_checkpointing_kwargs": "llm_rl sets these itself with model.gradient_checkpointing",
    "dataset_config": "llm_rl reads a hub dataset's default configuration; save the one you need locally",
    "torch_dtype": "",  # handled in import_dtype
    "dtype": "",
}

# Keys TRL has removed: the clear word the issue tracker keeps being asked for.
REMOVED_FROM_TRL = {
    "max_prompt_length": (
        "data.max_prompt_length",
        "removed from TRL's GRPOConfig (it no longer truncates prompts); llm_rl drops longer prompts "
        "and counts them",
    ),
    "vllm_max_model_len": ("grpo.vllm_max_model_length", "renamed in TRL to vllm_max_model_length"),
    "vllm_guided_decoding_regex": (
        "grpo.vllm_structured_outputs_regex",
        "renamed in TRL to vllm_structured_outputs_regex",
    ),
    "wandb_log_unique_prompts": ("grpo.log_unique_prompts", "renamed in TRL to log_unique_prompts"),
}

# Reward names of TRL's grpo script and open-r1 -> our reward entry (without weight), and a note.
FLAT_REWARDS: dict[str, tuple[dict[str, Any], str]] = {
    "accuracy": (
        {"name": "accuracy", "answer_column": "solution"},
        "math-verify against the `solution` column",
    ),
    "accuracy_reward": ({"name": "accuracy", "answer_column": "solution"}, "math-verify against `solution`"),
    "format": ({"name": "format"}, "open-r1's <think>/<answer> format (our default pattern)"),
    "think_format_reward": (
        {"name": "format", "pattern": r"^<think>(?!.*<think>)(.*?)</think>.*$", "alias": "think_format"},
        "TRL's think_format_reward pattern",
    ),
}

DTYPE_NAMES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32", "auto": "auto"}


def import_flat(flat: dict[str, Any]) -> Migration:
    """A flat TRL-style GRPO YAML as our GRPO recipe, each key accounted for."""
    grpo_fields = ALGORITHMS["grpo"].section_fields()
    out = Migration({"algorithm": "grpo"})
    handled = {
        "reward_funcs", "reward_weights", "reward_model_name_or_path", "bf16", "fp16", "report_to",
        "save_strategy", "save_steps", "resume_from_checkpoint", "eval_strategy", "evaluation_strategy",
        "eval_steps",
    }  # fmt: skip
    import_rewards(flat, out)
    import_precision(flat, out)
    import_reporting(flat, out)
    import_saving(flat, out)
    import_resume(flat, out)
    import_evaluation(flat, out)
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
        elif key in grpo_fields:
            put(out.recipe, f"grpo.{key}", value)
            out.keep(key, value, f"grpo.{key}")
        else:
            out.warn(key, value, "not a field of TRL's GRPOConfig or of its scripts: not carried")
    return out


def import_rewards(flat: dict[str, Any], out: Migration) -> None:
    """`reward_model_name_or_path`, `reward_funcs` and `reward_weights` as our `rewards:` list."""
    names = list(flat.get("reward_funcs") or [])
    weights = flat.get("reward_weights")
    entries: list[dict[str, Any]] = []
    path = flat.get("reward_model_name_or_path")
    if path:
        entries.append({"name": "reward_model", "path": path})
        out.keep("reward_model_name_or_path", path, "rewards[0] (reward_model)")
    for name in names:
        index = len(entries)
        if name in FLAT_REWARDS:
            entry, note = FLAT_REWARDS[name]
            entries.append(copy.deepcopy(entry))
            out.keep(f"reward_funcs: {name}", name, f"rewards[{index}] ({entry['name']})", note)
        elif ":" in name or "." in name:
            module, _, function = name.rpartition(":" if ":" in name else ".")
            entries.append({"name": f"{module}:{function}"})
            out.keep(f"reward_funcs: {name}", name, f"rewards[{index}]", "your function, by import path")
        else:
            entries.append({"name": name})
            out.warn(
                f"reward_funcs: {name}",
                name,
                "no built-in of this name: name your implementation as package.module:function",
                f"rewards[{index}]",
            )
    if weights is not None:
        if len(weights) != len(entries):
            raise RecipeError(
                f"reward_weights has {len(weights)} weights for {len(entries)} reward functions",
                where="reward_weights",
            )
        for entry, weight in zip(entries, weights, strict=True):
            entry["weight"] = float(weight)
        out.keep("reward_weights", weights, "rewards[].weight")
    if entries:
        out.recipe["rewards"] = entries


def import_precision(flat: dict[str, Any], out: Migration) -> None:
    """`bf16` / `fp16` as `training.precision`."""
    for key in ("bf16", "fp16"):
        if key in flat:
            if flat[key]:
                put(out.recipe, "training.precision", key)
                out.keep(key, flat[key], "training.precision")
            else:
                out.keep(key, flat[key], "-", "off: training.precision stays auto")


def import_dtype(key: str, value: Any, out: Migration) -> None:
    """`torch_dtype` / `dtype` as `model.dtype`."""
    if value in DTYPE_NAMES:
        put(out.recipe, "model.dtype", DTYPE_NAMES[value])
        out.keep(key, value, "model.dtype")
    else:
        out.warn(key, value, f"not a dtype llm_rl loads ({', '.join(DTYPE_NAMES)})")


def import_reporting(flat: dict[str, Any], out: Migration) -> None:
    """`report_to` as the wandb mode and the TensorBoard switch."""
    if "report_to" not in flat:
        return
    value = flat["report_to"]
    targets = [value] if isinstance(value, str) else list(value or [])
    mode = "auto" if "wandb" in targets or "all" in targets else "disabled"
    put(out.recipe, "monitoring.wandb.mode", mode)
    if "tensorboard" in targets or "all" in targets:
        put(out.recipe, "monitoring.tensorboard", True)
    out.keep("report_to", value, "monitoring.wandb.mode", f"wandb {mode}")


def import_saving(flat: dict[str, Any], out: Migration) -> None:
    """`save_strategy` and `save_steps`: a cadence in updates, and nothing from a run that saved nothing."""
    strategy = flat.get("save_strategy", "steps")
    if "save_strategy" in flat:
        if strategy == "steps" and "save_steps" in flat:
            out.keep("save_strategy", strategy, "checkpointing.unit", "every save_steps updates")
        else:
            why = {
                "no": "the source saved no checkpoints",
                "steps": "TRL's default save_steps is not carried",
            }.get(strategy, "checkpointing.every counts samples or steps, not epochs")
            out.warn(
                "save_strategy",
                strategy,
                f"{why}: llm_rl checkpoints every checkpointing.every (default 100,000 samples)",
            )
    if "save_steps" in flat and import_cadence(flat, "save_steps", "save_strategy", strategy, out):
        put(out.recipe, "checkpointing.every", flat["save_steps"])
        put(out.recipe, "checkpointing.unit", "steps")
        out.keep("save_steps", flat["save_steps"], "checkpointing.every", "unit: steps")


def import_resume(flat: dict[str, Any], out: Migration) -> None:
    """`resume_from_checkpoint`: false or null never resumes, true the latest checkpoint, a path that one."""
    if "resume_from_checkpoint" not in flat:
        return
    value = flat["resume_from_checkpoint"]
    if isinstance(value, str):
        resume = value
    elif value is True:
        resume = "auto"
    elif value is False or value is None:
        resume = "never"
    else:
        out.warn("resume_from_checkpoint", value, "neither a path nor true/false: not carried")
        return
    put(out.recipe, "checkpointing.resume", resume)
    out.keep("resume_from_checkpoint", value, "checkpointing.resume", f"{resume!r}")


def import_evaluation(flat: dict[str, Any], out: Migration) -> None:
    """`eval_strategy` (or its old name `evaluation_strategy`) and `eval_steps`: held-out reward every
    `eval_steps` updates, or never."""
    key = "eval_strategy" if "eval_strategy" in flat else "evaluation_strategy"
    strategy = flat.get(key, "steps" if "eval_steps" in flat else "no")
    if key in flat:
        if strategy == "steps":
            out.keep(key, strategy, "evaluation.every", "every eval_steps updates")
        elif strategy == "no":
            out.keep(key, strategy, "evaluation.every", "never: the source did not evaluate")
        else:
            out.warn(key, strategy, "evaluation.every counts updates, not epochs: not carried")
    if "eval_steps" in flat and import_cadence(flat, "eval_steps", key, strategy, out):
        put(out.recipe, "evaluation.every", flat["eval_steps"])
        out.keep("eval_steps", flat["eval_steps"], "evaluation.every")


def import_cadence(flat: dict[str, Any], key: str, strategy_key: str, strategy: str, out: Migration) -> bool:
    """Whether `save_steps` or `eval_steps` carries over: a whole number of updates under the `steps`
    strategy; otherwise a warning row says why not."""
    value = flat[key]
    if strategy != "steps":
        out.warn(key, value, f"not used by the source ({strategy_key} {strategy!r}): not carried")
        return False
    if not (isinstance(value, int) and value >= 1):
        out.warn(key, value, "a fraction of the run: not carried; give a number of updates")
        return False
    return True
