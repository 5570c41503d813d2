"""Schedules: a scalar setting's value as a function of the samples seen since the run started.

Which keys may follow a schedule, and the rules between a schedule and the rest of the recipe, are
`llm_rl.recipe.schedules`."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field

from llm_rl.schema.section import Section


class ConstantSchedule(Section):
    kind: Literal["constant"]
    value: float

    def value_at(self, samples: int) -> float:
        return self.value


class RampSchedule(Section):
    """From `start` to `end` over `samples` samples, beginning `begin` samples into the run."""

    start: float
    end: float
    samples: int = Field(gt=0)
    begin: int = Field(0, ge=0)

    def progress(self, samples: int) -> float:
        """How far along the ramp the run is at `samples`: 0 before it, 1 after it."""
        return min(max(samples - self.begin, 0) / self.samples, 1.0)


class LinearSchedule(RampSchedule):
    """A straight line from `start` to `end`."""

    kind: Literal["linear"]

    def value_at(self, samples: int) -> float:
        return self.start + (self.end - self.start) * self.progress(samples)


class CosineSchedule(RampSchedule):
    """A half cosine from `start` to `end` (slow at both ends)."""

    kind: Literal["cosine"]

    def value_at(self, samples: int) -> float:
        return self.end + (self.start - self.end) * 0.5 * (1.0 + math.cos(math.pi * self.progress(samples)))


class StepSchedule(Section):
    """`start`, multiplied by `factor` every `every` samples (0.5: halving), never past `limit`."""

    kind: Literal["step"]
    start: float
    factor: float = Field(gt=0.0)
    every: int = Field(gt=0)
    limit: float | None = None

    def value_at(self, samples: int) -> float:
        value = self.start * self.factor ** (samples // self.every)
        if self.limit is None:
            return value
        return max(value, self.limit) if self.factor < 1 else min(value, self.limit)


Schedule = Annotated[
    ConstantSchedule | LinearSchedule | CosineSchedule | StepSchedule, Field(discriminator="kind")
]
