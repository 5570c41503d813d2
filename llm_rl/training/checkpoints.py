"""Checkpoints for both algorithms: named by samples, written atomically, rotated, with the best one kept.

The trainers write each checkpoint into `<output_dir>/.staging/checkpoint-<step>` (`StagedCheckpoints`).
Once every rank has finished writing, the main process adds `llm_rl_state.json` (counters, the
checkpoint's score, the early-stopping state) and renames the folder to `checkpoint-<samples>`: a
folder with that name is complete, and a crash while writing leaves only `.staging`, which the next
run clears. Only folders holding `llm_rl_state.json` count as checkpoints.

Rotation keeps the newest `keep_last` checkpoints and the best one (by its score: the early-stopping
metric averaged over the last round of rows before it was written).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelerate import PartialState
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from llm_rl.errors import CheckpointError, UserInputError
from llm_rl.run_folder import apply_umask
from llm_rl.training.checkpoint_files import STATE_FILE, check_checkpoint, manifest, read_checkpoint_state
from llm_rl.training.disk_space import warn_if_no_room
from llm_rl.training.early_stopping import EarlyStopping, MetricWindow

ROLLED_BACK_DIR = "rolled_back"
CHECKPOINT_PATTERN = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
STAGING_DIR = ".staging"


def list_checkpoints(output_dir: Path) -> list[Path]:
    """Complete checkpoint folders in a run folder, oldest first (by the number in the name)."""
    if not output_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in output_dir.iterdir() if (m := CHECKPOINT_PATTERN.match(p.name))]
    return [path for _, path in sorted(found) if (path / STATE_FILE).is_file()]


def read_state(checkpoint: Path) -> dict[str, Any]:
    """The `llm_rl_state.json` of a checkpoint (a `CheckpointError` naming it when it does not read)."""
    return read_checkpoint_state(checkpoint)


def is_readable(checkpoint: Path) -> bool:
    """Whether every file of a checkpoint is there and reads (`check_checkpoint`)."""
    try:
        check_checkpoint(checkpoint)
    except CheckpointError:
        return False
    return True


def newest_readable(output_dir: Path) -> tuple[Path | None, list[tuple[Path, CheckpointError]]]:
    """The newest checkpoint whose files all read, and each newer one that does not, with why."""
    damaged = []
    for checkpoint in reversed(list_checkpoints(output_dir)):
        try:
            check_checkpoint(checkpoint)
        except CheckpointError as err:
            damaged.append((checkpoint, err))
            continue
        return checkpoint, damaged
    return None, damaged


def best_checkpoint(output_dir: Path, mode: str) -> Path | None:
    """The complete checkpoint with the best score (`mode`: max or min), or None when none has one; a
    checkpoint whose state does not read has no score."""
    scored = [(saved_score(path), path) for path in list_checkpoints(output_dir)]
    scored = [
        (score, path) for score, path in scored if isinstance(score, int | float) and math.isfinite(score)
    ]
    if not scored:
        return None
    pick = max if mode == "max" else min
    return pick(scored, key=lambda item: item[0])[1]


def saved_score(checkpoint: Path) -> Any:
    """The score a checkpoint was saved with, or None when its state does not read."""
    try:
        return read_state(checkpoint).get("score")
    except CheckpointError:
        return None


def clear_staging(output_dir: Path) -> None:
    """Remove what a crash left half-written."""
    shutil.rmtree(output_dir / STAGING_DIR, ignore_errors=True)


class StagedCheckpoints:
    """Trainer mixin: checkpoints are written into `<output_dir>/.staging`, not into the run folder."""

    def _get_output_dir(self, trial: Any) -> str:
        return str(Path(self.args.output_dir) / STAGING_DIR)


class CheckpointManager(TrainerCallback):
    """Turns each staged checkpoint into a complete `checkpoint-<samples>` folder, then rotates.

    `score` watches the metric rows (as a `MetricsCallback` observer); `early_stopping`, when on, has its
    state saved with every checkpoint so that a resumed run continues counting rounds.
    """

    def __init__(
        self,
        count_samples: Callable[[Any, dict[str, Any]], int],
        keep_last: int | None,
        score: MetricWindow,
        early_stopping: EarlyStopping | None = None,
    ) -> None:
        self.count_samples = count_samples
        self.keep_last = keep_last
        self.score = score
        self.early_stopping = early_stopping

    def on_save(self, args, state, control, **kwargs):
        # Every rank writes its own files (RNG state, optimizer shards): finish only once all are done.
        PartialState().wait_for_everyone()
        if state.is_world_process_zero:
            output_dir = Path(args.output_dir)
            staged = output_dir / STAGING_DIR / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            samples = self.count_samples(state, {})
            target = output_dir / f"{PREFIX_CHECKPOINT_DIR}-{samples}"
            self.complete(staged, target, state.global_step, samples)
            self.rotate(output_dir)
            warn_if_no_room(target)
        PartialState().wait_for_everyone()

    def complete(self, staged: Path, target: Path, step: int, samples: int) -> None:
        """Write the state file into the staged folder, then move it into place in one rename."""
        record = {
            "step": step,
            "samples": samples,
            "score": self.score.value(),
            "metric": self.score.metric,
            "mode": self.score.mode,
            "early_stopping": self.early_stopping.state_dict() if self.early_stopping else None,
            # Every file and its size: a later check finds one gone missing or cut short.
            "files": manifest(staged),
        }
        (staged / STATE_FILE).write_text(json.dumps(record, indent=2) + "\n")
        apply_umask(staged)
        if target.exists():  # saved again at the same step (a stop right after a periodic save)
            shutil.rmtree(target)
        staged.rename(target)
        if not any(staged.parent.iterdir()):
            staged.parent.rmdir()

    def rotate(self, output_dir: Path) -> None:
        """Delete all but the newest `keep_last` complete checkpoints, the best one, and the newest one that
        still reads whole (never deleted in favour of damaged ones)."""
        if self.keep_last is None:
            return
        checkpoints = list_checkpoints(output_dir)
        keep = set(checkpoints[-self.keep_last :])
        best = best_checkpoint(output_dir, self.score.mode)
        if best is not None:
            keep.add(best)
        readable, _ = newest_readable(output_dir)
        if readable is not None:
            keep.add(readable)
        for path in checkpoints:
            if path not in keep:
                shutil.rmtree(path)


def rollback(run_dir: Path, to: str | None, best: bool) -> tuple[Path, Path | None]:
    """Make a checkpoint the one the next run resumes from: later checkpoints, `final/`, the summary and
    the later metric rows move into `rolled_back/<time>/`, nothing is deleted. Returns (target, aside).
    """
    checkpoints = list_checkpoints(run_dir)
    if not checkpoints:
        raise UserInputError("no complete checkpoint to roll back to", where=str(run_dir))
    if best:
        target = best_checkpoint(run_dir, read_state(checkpoints[-1]).get("mode", "max"))
        if target is None:
            raise UserInputError("no checkpoint has a score to pick the best by", where=str(run_dir))
    else:
        target = run_dir / str(to)
        if target not in checkpoints:
            names = ", ".join(path.name for path in checkpoints)
            raise UserInputError(
                f"{to!r} is not a complete checkpoint here; there are: {names}", where=str(run_dir)
            )
    check_checkpoint(target)
    later = [path for path in checkpoints if checkpoints.index(path) > checkpoints.index(target)]
    later += [run_dir / name for name in ("final", "run_summary.json") if (run_dir / name).exists()]
    metrics = run_dir / "metrics.jsonl"
    if not later and not metrics.exists():
        return target, None
    aside = run_dir / ROLLED_BACK_DIR / time.strftime("%Y%m%d-%H%M%S")
    aside.mkdir(parents=True)
    for path in later:
        path.rename(aside / path.name)
    if metrics.exists():
        shutil.copy2(metrics, aside / metrics.name)
        last_step = read_state(target)["step"]
        kept = [line for line in metrics.read_text().splitlines() if json.loads(line)["step"] <= last_step]
        partial = metrics.with_name(f".{metrics.name}.partial")
        partial.write_text("".join(f"{line}\n" for line in kept))
        partial.replace(metrics)
    return target, aside
