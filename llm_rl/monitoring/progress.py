"""What a person watching the terminal sees: the trainer's progress bar and a short line of metrics.

A log file gets the lines alone: progress bars redraw themselves with carriage returns, hundreds of
frames that bury the step lines of a log (`make demo > demo.log 2>&1`).
"""

from __future__ import annotations

import sys
from typing import Any

import datasets
import huggingface_hub
import transformers
from tqdm.auto import tqdm
from transformers import ProgressCallback

SHOWN = ("reward/mean", "eval/reward/mean", "kl", "grad_norm", "loss/policy", "loss/value",
         "completion_length/mean")  # fmt: skip
# A row with this key (an evaluation: rare, and what a run is judged by) is always printed.
HELD_OUT = "eval/reward/mean"


def bars_wanted(progress: bool) -> bool:
    """Progress bars only for a person at a terminal (`monitoring.progress` on, both streams a tty)."""
    return progress and sys.stdout.isatty() and sys.stderr.isatty()


def without_bars() -> None:
    """No progress bars from the libraries a run goes through: weights loading (transformers), dataset
    maps (datasets) and downloads (the hub)."""
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()
    huggingface_hub.utils.disable_progress_bars()


class QuietProgressCallback(ProgressCallback):
    """The trainer's progress bar without its dump of every raw log dict (we print our own line)."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        return


class ProgressLine:
    """Prints a line of unified metrics for about `lines` of the `total_rows` rows of a run, and for
    every evaluation."""

    def __init__(self, total_rows: int, lines: int = 20, enabled: bool = True) -> None:
        self.every = max(1, total_rows // lines)
        self.enabled = enabled
        self._seen = 0

    def __call__(self, row: dict[str, Any]) -> None:
        self._seen += 1
        if self.enabled and ((self._seen - 1) % self.every == 0 or HELD_OUT in row):
            tqdm.write(format_row(row))


def format_row(row: dict[str, Any]) -> str:
    """`step 10  samples 640  reward/mean 0.31  kl 0.002 ...`"""
    shown = [f"{key} {row[key]:.4g}" for key in SHOWN if isinstance(row.get(key), int | float)]
    return f"step {row['step']:>5}  samples {row['samples']:>7}  " + "  ".join(shown)
