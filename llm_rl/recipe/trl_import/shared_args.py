"""The arguments TRL's GRPO and PPO scripts share (TrainingArguments, ModelConfig, ScriptArguments) that
are more than one key for one key: those llm_rl has no use for, switches it does not have, precision,
dtype and reporting."""

from __future__ import annotations

from typing import Any

from llm_rl.recipe.accounting import Migration, put

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
    "torch_dtype": "",  # handled in import_dtype
    "dtype": "",
    # open-r1's GRPOConfig additions.
    "benchmarks": "open-r1's post-training benchmarks: llm_rl measures held-out reward with evaluation.every",
    "callbacks": "open-r1's hub-push callbacks: llm_rl writes final/ locally",
    "hub_model_revision": "llm_rl does not push to the hub",
    "num_completions_to_print": "see completions with `llm-rl sample RUN_DIR`",
}

# Switches that are off unless a file turns them on, at their off value -> what llm_rl does instead.
# Off, they get a plain row; on, a warning.
FLAT_SWITCHES: dict[str, tuple[Any, str]] = {
    # TRL's ModelConfig.
    "use_rslora": (False, "llm_rl's LoRA scales by alpha / r (plain LoRA)"),
    "use_dora": (False, "llm_rl's LoRA is plain LoRA, not DoRA"),
    "lora_modules_to_save": (None, "llm_rl's LoRA trains the adapters only"),
    "lora_target_parameters": (None, "llm_rl targets modules (model.lora.target_modules), not parameters"),
    "lora_task_type": ("CAUSAL_LM", "llm_rl's LoRA is for causal LMs"),
    "load_in_8bit": (
        False,
        "llm_rl does not load quantised weights (no QLoRA): the model loads in model.dtype",
    ),
    "load_in_4bit": (
        False,
        "llm_rl does not load quantised weights (no QLoRA): the model loads in model.dtype",
    ),
    "bnb_4bit_quant_type": ("nf4", "a setting of 4-bit loading, which llm_rl does not do"),
    "use_bnb_nested_quant": (False, "a setting of 4-bit loading, which llm_rl does not do"),
    "bnb_4bit_quant_storage": (None, "a setting of 4-bit loading, which llm_rl does not do"),
    # TRL's ScriptArguments.
    "ignore_bias_buffers": (False, "a DDP workaround of TRL's scripts for models with bias buffers"),
    # open-r1's GRPOConfig.
    "overwrite_hub_revision": (False, "llm_rl does not push to the hub"),
    "push_to_hub_revision": (False, "llm_rl does not push to the hub"),
}

# `torch_dtype` / `dtype` values llm_rl loads -> model.dtype.
DTYPE_NAMES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32", "auto": "auto"}


def import_switch(key: str, value: Any, out: Migration) -> None:
    """A switch llm_rl does not have: a plain row when it is off, a warning naming what llm_rl does
    instead when it is on."""
    off, instead = FLAT_SWITCHES[key]
    if value == off or value is None:
        out.keep(key, value, "-", f"off, as in llm_rl: {instead}")
    else:
        out.warn(key, value, f"not carried: {instead}")


def import_precision(flat: dict[str, Any], out: Migration) -> None:
    """`bf16` / `fp16` as `training.precision`: the one switched on, else auto."""
    chosen = next((key for key in ("bf16", "fp16") if flat.get(key)), None)
    for key in ("bf16", "fp16"):
        if key not in flat:
            continue
        if key == chosen:
            put(out.recipe, "training.precision", key)
            out.keep(key, flat[key], "training.precision", key)
        elif chosen:
            out.keep(key, flat[key], "training.precision", f"off: {chosen} is on")
        else:
            out.keep(key, flat[key], "training.precision", "off: auto (bf16 where the GPU has it, else fp32)")


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
