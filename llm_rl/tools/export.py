"""`llm-rl export`: a run's policy as a `save_pretrained` folder for inference engines.

The source is a run folder (its `final/`), a `final/` or a checkpoint. Only the policy and its tokenizer
are written, in the dtype asked for: no optimizer states, no PPO critic. A LoRA adapter is written as an
adapter (with its base named in `adapter_config.json`) unless `--merge-lora` folds it into the base.
The folder is written beside its target and renamed into place; an existing target is never replaced.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from llm_rl.errors import ModelError, first_line
from llm_rl.models.load import is_adapter_folder, merged_adapter_path
from llm_rl.run_folder import FINAL_DIR, VALUE_MODEL_DIR, apply_umask
from llm_rl.training.checkpoint_files import STATE_FILE, check_checkpoint
from llm_rl.training.checkpoints import list_checkpoints

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def policy_folder(source: Path) -> Path:
    """The folder holding the policy: a run folder's final/ (its latest checkpoint before it has one),
    or the folder itself."""
    if (source / FINAL_DIR).is_dir():
        return source / FINAL_DIR
    if (source / STATE_FILE).is_file():  # a checkpoint: only one that reads whole
        check_checkpoint(source)
        return source
    if (source / "config.json").is_file() or is_adapter_folder(source):
        return source
    checkpoints = list_checkpoints(source)
    if checkpoints:
        check_checkpoint(checkpoints[-1])
        return checkpoints[-1]
    raise ModelError(
        "neither a run folder with final/ or a checkpoint, nor a model or adapter folder", where=str(source)
    )


def export_policy(source: Path, output: Path, dtype: str, merge_lora: bool) -> Path:
    """Write the policy at `source` to `output` in `dtype`; returns `output`."""
    if output.exists() and any(output.iterdir()):
        raise ModelError("already exists and is not empty: export writes a new folder", where=str(output))
    folder = policy_folder(source)
    partial = output.with_name(f".{output.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    if is_adapter_folder(folder) and not merge_lora:
        shutil.copytree(
            folder, partial, ignore=shutil.ignore_patterns(VALUE_MODEL_DIR, "*.pt", "*.pth", "rng_state*")
        )
    else:
        weights = merged_adapter_path(folder) if is_adapter_folder(folder) else folder
        try:
            model = AutoModelForCausalLM.from_pretrained(weights, dtype=DTYPES[dtype])
        except Exception as err:
            raise ModelError(f"the policy does not load: {first_line(err)}", where=str(weights)) from None
        model.save_pretrained(partial, safe_serialization=True)
        AutoTokenizer.from_pretrained(folder).save_pretrained(partial)
    apply_umask(partial)
    output.parent.mkdir(parents=True, exist_ok=True)
    if output.exists():
        output.rmdir()
    partial.rename(output)
    return output
