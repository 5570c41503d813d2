"""Checkpoint files read back: whether a checkpoint is whole, and a model's weights loaded in place.

`manifest` lists every file of a checkpoint with its size when it is written (kept in its
`llm_rl_state.json`); `check_checkpoint` finds the first file since gone missing, cut short or
unreadable (a full disk, a failed copy), and names it. Files of checkpoints written before the manifest
are still checked by format: a safetensors header, a torch zip archive's directory, a JSON document.

A model's weights read back from a checkpoint folder that `save_pretrained` wrote, with public APIs only:

`load_weights` fills a model in place: a LoRA adapter (`adapter_model.safetensors`) into a `PeftModel`
through peft's `set_peft_model_state_dict`, else the full weights (`model.safetensors`, or the shards its
`model.safetensors.index.json` lists) through `load_state_dict`. `save_pretrained` leaves out weights tied
to another (a tied LM head, as SmolLM2's): those are filled by the one they share storage with. Anything
else missing, any weight the model does not have, and any file that is absent or does not read (a copy
cut short, a full disk) is a `CheckpointError` naming the file.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from llm_rl.errors import CheckpointError, first_line

# What makes a folder named checkpoint-N complete: written last, holding the counters and the manifest.
STATE_FILE = "llm_rl_state.json"
WEIGHTS_FILE = "model.safetensors"
# torch.save's archives (optimizer, scheduler, RNG, DeepSpeed states) and Trainer's JSON files.
TORCH_SUFFIXES = (".pt", ".pth", ".bin")


def manifest(folder: Path) -> dict[str, int]:
    """Every file under a checkpoint folder (its path inside it) with its size in bytes."""
    return {
        str(path.relative_to(folder)): path.stat().st_size
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def read_checkpoint_state(checkpoint: Path) -> dict[str, Any]:
    """A checkpoint's `llm_rl_state.json`; one that does not parse is a `CheckpointError` naming it."""
    path = checkpoint / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"unreadable ({first_line(err)})", where=str(path)) from None
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise CheckpointError("not a checkpoint state (no step count)", where=str(path))
    return state


def check_checkpoint(checkpoint: Path) -> None:
    """Raise a `CheckpointError` naming the first file of `checkpoint` that is missing, cut short or
    unreadable; return quietly when the whole checkpoint reads."""
    state = read_checkpoint_state(checkpoint)
    for name, size in (state.get("files") or {}).items():
        path = checkpoint / name
        if not path.is_file():
            raise CheckpointError("missing", where=str(path))
        if path.stat().st_size != size:
            raise CheckpointError(
                f"cut short or changed: {path.stat().st_size} bytes, {size} when written", where=str(path)
            )
    for path in sorted(checkpoint.rglob("*")):
        if path.is_file():
            check_file_format(path)


def check_file_format(path: Path) -> None:
    """The cheap structural check of one file, by its suffix: a safetensors header, a zip directory, JSON."""
    try:
        if path.suffix == ".safetensors":
            with safe_open(path, "pt"):
                pass
        elif path.suffix in TORCH_SUFFIXES:
            zipfile.ZipFile(path).close()
        elif path.suffix == ".json":
            json.loads(path.read_text())
    except (SafetensorError, zipfile.BadZipFile, json.JSONDecodeError, UnicodeDecodeError, OSError) as err:
        raise CheckpointError(f"unreadable ({first_line(err)})", where=str(path)) from None


WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
ADAPTER_FILE = "adapter_model.safetensors"


def load_weights(model: torch.nn.Module, folder: Path) -> None:
    """Load the checkpoint in `folder` into `model` in place (module docstring)."""
    folder = Path(folder)
    if is_peft_model(model):
        load_adapter(model, folder / ADAPTER_FILE)
        return
    state: dict[str, torch.Tensor] = {}
    for path in weight_files(folder):
        state.update(read_tensors(path))
    where = folder / WEIGHTS_FILE if (folder / WEIGHTS_FILE).exists() else folder / WEIGHTS_INDEX_FILE
    check_fits(model, state, where)
    model.load_state_dict(state, strict=False)


def is_peft_model(model: torch.nn.Module) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a `save_pretrained` folder: its one file, or the shards its index lists."""
    index = folder / WEIGHTS_INDEX_FILE
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise CheckpointError(f"not a weights index ({first_line(err)})", where=str(index)) from None
        return [folder / name for name in sorted(set(weight_map.values()))]
    return [folder / WEIGHTS_FILE]


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of one safetensors file, on the CPU; a missing or damaged file names itself."""
    if not path.is_file():
        raise CheckpointError("missing", where=str(path))
    try:
        return load_file(path, device="cpu")
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"unreadable ({first_line(err)})", where=str(path)) from None


def check_fits(model: torch.nn.Module, state: dict[str, torch.Tensor], where: Path) -> None:
    """Refuse weights the model lacks, weights of another shape, and missing weights not tied to loaded ones."""
    own = model.state_dict()
    unexpected = sorted(set(state) - set(own))
    reshaped = sorted(k for k in set(state) & set(own) if state[k].shape != own[k].shape)
    loaded = {own[key].data_ptr() for key in state if key in own}
    missing = sorted(k for k in set(own) - set(state) if own[k].data_ptr() not in loaded)
    for problem, keys in (("has weights the model lacks", unexpected), ("changes the shape of", reshaped),
                          ("lacks", missing)):  # fmt: skip
        if keys:
            shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
            raise CheckpointError(f"does not fit the model: it {problem} {shown}", where=str(where))


def load_adapter(model: torch.nn.Module, path: Path) -> None:
    """A LoRA adapter's weights into a `PeftModel` (its active adapter)."""
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(model, read_tensors(path))
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise CheckpointError(
            f"does not fit the model: it has weights the adapter lacks ({', '.join(unexpected[:3])})",
            where=str(path),
        )
