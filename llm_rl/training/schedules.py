"""Scheduled settings: scalars a trainer reads every update, following a schedule in samples.

Before each update `ScheduleCallback` computes every schedule's value at the run's sample count (a
staged run counts from its first stage), sets it on the trainer through the algorithm's
`apply_setting`, and adds it to the next metric row as `schedule/<key>`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

from llm_rl.schema import Recipe, Schedule


def active_schedules(recipe: Recipe, schedulable: tuple[str, ...]) -> dict[str, Schedule]:
    """The schedules of the keys the recipe's algorithm reads (`schedulable`); the other algorithms'
    keys wait for a swap, like their sections."""
    return {key: value for key, value in recipe.schedules.items() if key in schedulable}


def start_values(recipe: Recipe, schedulable: tuple[str, ...]) -> dict[str, float]:
    """Scheduled settings at sample 0, by field name (the key after its section), for the trainer's construction."""
    values = {}
    for key, schedule in active_schedules(recipe, schedulable).items():
        field = key.split(".", 1)[1]
        values[field] = schedule.value_at(0)
    return values


class ScheduleCallback(TrainerCallback):
    """Sets each scheduled value before every update and logs the value in force as `schedule/<key>`."""

    def __init__(
        self,
        schedules: dict[str, Schedule],
        count_samples: Callable[[Any, dict[str, Any]], int],
        samples_offset: int = 0,
    ) -> None:
        self.schedules = schedules
        self.count_samples = count_samples
        self.samples_offset = samples_offset
        self.current: dict[str, float] = {}
        # Where a value is set: the trainer's own setting, known once the trainer is built (`set_through`).
        self.apply: Callable[[str, float], None] | None = None

    def set_through(self, apply: Callable[[str, float], None]) -> None:
        """Set each value with `apply(key, value)` (the algorithm's `apply_setting` on its trainer): the
        callback is made before the trainer that it sets, so that it joins the trainer's callback list."""
        self.apply = apply

    def update(self, state: Any) -> None:
        """Apply every schedule's value at the run's sample count now."""
        samples = self.samples_offset + self.count_samples(state, {})
        if self.apply is None:
            raise RuntimeError("ScheduleCallback.set_through was not called: no trainer to set values on")
        for key, schedule in self.schedules.items():
            value = schedule.value_at(samples)
            self.apply(key, value)
            self.current[key] = value

    def on_train_begin(self, args, state, control, **kwargs):
        self.update(state)

    def on_step_begin(self, args, state, control, **kwargs):
        self.update(state)

    def __call__(self, row: dict[str, Any]) -> None:
        """A metric-row observer: the values in force during the update the row logs."""
        row.update({f"schedule/{key}": value for key, value in self.current.items()})
