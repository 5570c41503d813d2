"""Unified metrics: TRL's log names mapped onto one set of keys for both algorithms.

`MetricsCallback` receives each trainer log, renames its keys with the algorithm's table, adds the
counters we keep ourselves (`samples`, `samples_per_second`, `peak_memory_mb`, and the GPUs' health
where NVML answers: `llm_rl.monitoring.gpu_health`) and hands one row to every sink: `metrics.jsonl` in the run folder, wandb and TensorBoard (x-axis: `samples`).
"""

from __future__ import annotations

import json
import math
import resource
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import torch
from transformers import TrainerCallback

from llm_rl.monitoring.gpu_health import GpuHealth

# Keys both algorithms share where the quantity exists (DESIGN.md, "metrics.jsonl").
COMMON_KEYS = (
    "step",
    "samples",
    "reward/mean",
    "reward/std",
    "kl",
    "grad_norm",
    "loss/policy",
    "learning_rate",
    "completion_length/mean",
    "samples_per_second",
    "peak_memory_mb",
)


class MetricSink(Protocol):
    """Where a row of unified metrics goes."""

    def write(self, row: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """Appends one JSON object per row to `metrics.jsonl`, flushed at once so a crash loses nothing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = path.open("a", encoding="utf-8")

    def write(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps(row, allow_nan=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardSink:
    """Writes each metric as a TensorBoard scalar against `samples`."""

    def __init__(self, log_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(log_dir))

    def write(self, row: dict[str, Any]) -> None:
        for key, value in row.items():
            if key not in ("step", "samples") and isinstance(value, int | float):
                self._writer.add_scalar(key, value, global_step=row["samples"])
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def rename_metrics(logs: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """Keep the keys the table knows, under their unified names, plus `rewards/...` and `eval/...` keys."""
    row: dict[str, Any] = {}
    for key, value in logs.items():
        if key in names:
            row[names[key]] = value
        elif key.startswith(("rewards/", "eval/")):
            row[key] = value
    return row


def finite_numbers(row: dict[str, Any]) -> dict[str, Any]:
    """Numbers as plain floats; NaN and inf become None so that the JSON stays valid and visible."""
    clean: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, torch.Tensor):
            value = value.item()
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        clean[key] = value
    return clean


def peak_memory_mb() -> float:
    """Peak accelerator memory of this process, or its peak resident memory on CPU."""
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


class MetricsCallback(TrainerCallback):
    """Turns each trainer log into one unified row, on the main process only.

    `count_samples(state, logs)` returns the prompt-completion pairs consumed so far: each algorithm
    counts them its own way. `on_row` observers (early stopping, alerts, progress) see every row.
    """

    def __init__(
        self,
        names: dict[str, str],
        count_samples: Callable[[Any, dict[str, Any]], int],
        sinks: Iterable[MetricSink],
        on_row: Iterable[Callable[[dict[str, Any]], None]] = (),
        gpu_health: GpuHealth | None = None,
    ) -> None:
        self.names = names
        self.gpu_health = gpu_health
        self.count_samples = count_samples
        self.sinks = list(sinks)
        self.on_row = list(on_row)
        self.last_row: dict[str, Any] | None = None
        self._last_time = time.perf_counter()
        self._last_samples = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self._last_time = time.perf_counter()
        self._last_samples = self.count_samples(state, {})

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or not self._is_training_log(logs):
            return
        row = self.make_row(state, logs)
        # Observers first: alerts add their `alerts/<name>` keys to the row the sinks then write.
        for observer in self.on_row:
            observer(row)
        for sink in self.sinks:
            sink.write(row)
        self.last_row = row

    def on_train_end(self, args, state, control, **kwargs):
        self.close()

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
        self.sinks = []
        if self.gpu_health is not None:
            self.gpu_health.close()
            self.gpu_health = None

    def make_row(self, state, logs: dict[str, Any]) -> dict[str, Any]:
        """The unified row for one log: counters first, then the renamed metrics."""
        samples = self.count_samples(state, logs)
        now = time.perf_counter()
        elapsed = now - self._last_time
        # None for a row with no sample since the last (the evaluation at the start): no rate to give.
        new_samples = samples - self._last_samples
        throughput = new_samples / elapsed if elapsed > 0 and new_samples > 0 else None
        self._last_time, self._last_samples = now, samples
        row = {"step": state.global_step, "samples": samples}
        row.update(rename_metrics(logs, self.names))
        row["samples_per_second"] = throughput
        row["peak_memory_mb"] = peak_memory_mb()
        if self.gpu_health is not None:
            row.update(self.gpu_health.sample())
        return finite_numbers(row)

    @staticmethod
    def _is_training_log(logs: dict[str, Any]) -> bool:
        """The end-of-training summary log (train_runtime, ...) and eval logs are not rows."""
        return "train_runtime" not in logs and not any(k.startswith("eval_") for k in logs)


def first_and_last_mean(
    rows: list[dict[str, Any]], key: str = "reward/mean", fraction: float = 0.2
) -> tuple[float, float]:
    """Mean of `key` over the first and the last `fraction` of rows (rows without the key skipped)."""
    values = [row[key] for row in rows if isinstance(row.get(key), int | float)]
    if not values:
        raise ValueError(f"no rows with {key!r}")
    window = max(1, round(len(values) * fraction))
    return sum(values[:window]) / window, sum(values[-window:]) / window
