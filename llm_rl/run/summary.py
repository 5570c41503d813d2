"""run_summary.json (DESIGN.md): one builder for single-stage and staged runs, and its writer."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from llm_rl.run_folder import SUMMARY_FILE, reward_series, write_atomic
from llm_rl.training.disk_space import is_out_of_space


def run_summary(
    folder: Path,
    status: str,
    algorithm: str,
    steps: int,
    samples: int,
    started: float,
    checkpoints: list[Path],
    resumed_from: str | None,
    **more: Any,
) -> dict[str, Any]:
    """The summary of the run in `folder`; its rewards are read from the folder's metrics. `more`: what a
    staged run adds (its stages)."""
    rewards = reward_series(folder)
    return {
        "status": status,
        "algorithm": algorithm,
        "steps": steps,
        "samples": samples,
        "best_reward": max(rewards) if rewards else None,
        "final_reward": rewards[-1] if rewards else None,
        "wall_seconds": round(time.perf_counter() - started, 2),
        "checkpoints": [str(path) for path in checkpoints],
        "resumed_from": resumed_from,
        **more,
    }


def write_summary(folder: Path, summary: dict[str, Any]) -> None:
    """Write run_summary.json; on a disk still full, say so rather than hide the error the run stopped
    with (without a summary the run counts as unfinished, and the same command resumes it)."""
    try:
        write_atomic(folder / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    except OSError as err:
        if not is_out_of_space(err, folder):
            raise
        (folder / f".{SUMMARY_FILE}.partial").unlink(missing_ok=True)
        print(f"warning: {folder / SUMMARY_FILE} not written: no space left", file=sys.stderr)
