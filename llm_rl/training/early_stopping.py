"""Early stopping for both algorithms, decided on the main process and obeyed by every process.

The metric is averaged over each round of `rows_per_round` logging rows (one row is too noisy for RL);
after `patience` rounds without an improvement of more than `min_delta` over the best round, the run
saves a checkpoint and stops. Our PPO loop reads `should_training_stop` as TRL's GRPO loop does.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch.distributed as dist
from transformers import TrainerCallback

from llm_rl.schema import EarlyStoppingSection


class MetricWindow:
    """The mean of one metric over its last `size` rows (a `MetricsCallback` observer): a checkpoint's score."""

    def __init__(self, metric: str, size: int, mode: str) -> None:
        self.metric = metric
        self.mode = mode
        self._values: deque[float] = deque(maxlen=size)

    @classmethod
    def for_early_stopping(cls, settings: EarlyStoppingSection) -> MetricWindow:
        """The early-stopping metric over one round of rows."""
        return cls(settings.metric, settings.rows_per_round, settings.mode)

    def __call__(self, row: dict[str, Any]) -> None:
        value = row.get(self.metric)
        if isinstance(value, int | float):
            self._values.append(float(value))

    def value(self) -> float | None:
        return sum(self._values) / len(self._values) if self._values else None


class EarlyStopping(TrainerCallback):
    """Watches unified metric rows (as a `MetricsCallback` observer) and stops training on a plateau."""

    def __init__(self, settings: EarlyStoppingSection) -> None:
        self.settings = settings
        self.best: float | None = None
        self.rounds_without_improvement = 0
        self.triggered = False
        self._round: list[float] = []

    def __call__(self, row: dict[str, Any]) -> None:
        value = row.get(self.settings.metric)
        if not isinstance(value, int | float):
            return
        self._round.append(float(value))
        if len(self._round) == self.settings.rows_per_round:
            self.end_round(sum(self._round) / len(self._round))
            self._round = []

    def end_round(self, value: float) -> None:
        """Compare a round's mean with the best so far."""
        sign = 1.0 if self.settings.mode == "max" else -1.0
        if self.best is None or sign * (value - self.best) > self.settings.min_delta:
            self.best = value
            self.rounds_without_improvement = 0
            return
        self.rounds_without_improvement += 1
        if self.rounds_without_improvement >= self.settings.patience:
            self.triggered = True

    def on_log(self, args, state, control, **kwargs):
        # After MetricsCallback (earlier in the list) has fed this log's row to `__call__`; both trainers
        # save and stop right after a log, so the row that ends the patience ends the run.
        if share_from_main_process(self.triggered):
            self.triggered = True
            control.should_training_stop = True
            control.should_save = True
        return control

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps, so a resumed run continues counting rounds."""
        return {
            "best": self.best,
            "rounds_without_improvement": self.rounds_without_improvement,
            "round": list(self._round),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = state["best"]
        self.rounds_without_improvement = state["rounds_without_improvement"]
        self._round = list(state["round"])


def share_from_main_process(flag: bool) -> bool:
    """Rank 0's flag on every rank (rows, and so decisions, exist on rank 0 only)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    holder = [flag]
    dist.broadcast_object_list(holder, src=0)
    return bool(holder[0])
