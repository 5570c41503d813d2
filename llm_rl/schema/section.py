"""The base of every recipe section, and the error a rule between a section's keys raises."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Base of every recipe section: unknown keys are errors, values are checked strictly."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True)


class RuleBroken(ValueError):
    """A rule between keys, broken: its message names every key it concerns and is shown as it is
    (`llm_rl.recipe.errors.describe_validation_error`), not prefixed with the section's location."""
