"""The check every reward function's output goes through: one finite number or None per completion."""

from __future__ import annotations

import math
import numbers
from typing import Any, Literal

from llm_rl.errors import RewardError
from llm_rl.rewards.base import RewardFunction


class CheckedReward:
    """A reward function whose outputs are checked after every call, named by its metric name.

    A value that is not a finite number (NaN, inf, a bool, a string...) raises a `RewardError` naming the
    function and the sample, or with `on_invalid="skip"` becomes None (not applicable) and is counted:
    `skipped` over the run, `last_skipped` in the latest call, and, under TRL's GRPOTrainer (which passes
    `log_metric`), logged as `rewards/<name>/skipped`. None always passes through. A wrong number of
    values is always an error: it cannot be matched to samples.
    """

    def __init__(self, function: RewardFunction, name: str, on_invalid: Literal["error", "skip"] = "error"):
        self.function = function
        self.__name__ = name
        self.on_invalid = on_invalid
        self.skipped = 0
        self.last_skipped = 0

    def __repr__(self) -> str:
        return f"CheckedReward({self.__name__!r}, on_invalid={self.on_invalid!r})"

    def __call__(
        self, prompts: list[Any], completions: list[Any], completion_ids: Any = None, **kwargs: Any
    ) -> list[float | None]:
        values = self.function(
            prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs
        )
        checked = self.check(values, len(completions))
        log_metric = kwargs.get("log_metric")
        if self.on_invalid == "skip" and callable(log_metric):
            log_metric(f"rewards/{self.__name__}/skipped", float(self.last_skipped))
        return checked

    def check(self, values: Any, expected: int) -> list[float | None]:
        """The values as floats and Nones, after the length and per-sample checks."""
        if hasattr(values, "tolist"):  # a tensor or an array
            values = values.tolist()
        if not isinstance(values, (list, tuple)):
            raise RewardError(
                f"reward {self.__name__!r} returned a {type(values).__name__}, expected a list with one "
                f"value per completion"
            )
        if len(values) != expected:
            raise RewardError(
                f"reward {self.__name__!r} returned {len(values)} values for {expected} completions"
            )
        self.last_skipped = 0
        return [self.check_value(value, index) for index, value in enumerate(values)]

    def check_value(self, value: Any, index: int) -> float | None:
        """One sample's value as a float, None for not applicable; invalid ones raise or are skipped."""
        if value is None:
            return None
        if getattr(value, "ndim", None) == 0:  # a 0-d tensor or a numpy scalar
            value = value.item()
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        if self.on_invalid == "skip":
            self.last_skipped += 1
            self.skipped += 1
            return None
        raise RewardError(
            f"reward {self.__name__!r} returned {value!r} for sample {index} (expected a finite number or None)"
        )
