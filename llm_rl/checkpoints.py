"""Checkpoint folders named by samples consumed (`checkpoint-<samples>`), for both algorithms."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelerate import PartialState
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

CHECKPOINT_PATTERN = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")


def list_checkpoints(output_dir: Path) -> list[Path]:
    """Complete checkpoint folders in a run folder, oldest first (by the number in the name)."""
    if not output_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in output_dir.iterdir() if (m := CHECKPOINT_PATTERN.match(p.name))]
    return [path for _, path in sorted(found) if (path / "trainer_state.json").exists()]


class SampleNamedCheckpoints(TrainerCallback):
    """Renames the trainer's `checkpoint-<step>` folder to `checkpoint-<samples>` right after each save.

    The trainer's rotation (`save_total_limit`) and `get_last_checkpoint` sort by the number in the name;
    samples grow with steps, so both keep working on the renamed folders.
    """

    def __init__(self, count_samples: Callable[[Any, dict[str, Any]], int]) -> None:
        self.count_samples = count_samples

    def on_save(self, args, state, control, **kwargs):
        # Every rank writes its own files (RNG state) into the folder: rename only once all are done.
        PartialState().wait_for_everyone()
        if not state.is_world_process_zero:
            return
        step_dir = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        samples_dir = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{self.count_samples(state, {})}"
        if step_dir.exists() and step_dir != samples_dir and not samples_dir.exists():
            step_dir.rename(samples_dir)
