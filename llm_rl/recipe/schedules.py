"""The rules a recipe's `schedules:` must keep, in one place: each key is a setting some algorithm's
trainer reads every update, is not also set as a plain value, and starts where the active algorithm's
trainer can begin (`Algorithm.STARTS_ABOVE_ZERO`).

The schedule kinds and their values are `llm_rl.schema.schedules`; applying them while training is
`llm_rl.training.schedules`."""

from __future__ import annotations

from llm_rl.algorithms.registry import ALGORITHMS
from llm_rl.errors import RecipeError, did_you_mean
from llm_rl.schema import Recipe


def check_schedules(recipe: Recipe, where: str) -> None:
    """Every schedule names a schedulable setting, set in one place only, starting where it may."""
    check_starts(recipe, where)
    for key in recipe.schedules:
        check_schedulable(key, where)
        check_set_once(recipe, key, where)


def check_schedulable(key: str, where: str) -> None:
    """Some algorithm's trainer reads the setting every update (the other algorithms' keys wait for a
    swap, like their sections)."""
    every_key = {key for algorithm in ALGORITHMS.values() for key in algorithm.SCHEDULABLE}
    if key in every_key:
        return
    hint = did_you_mean(key, sorted(every_key))
    per_algorithm = "; ".join(
        f"{name.upper()}: {', '.join(algorithm.SCHEDULABLE)}" for name, algorithm in ALGORITHMS.items()
    )
    raise RecipeError(
        f"schedules.{key}: not a setting that can follow a schedule{hint}; {per_algorithm}", where=where
    )


def check_set_once(recipe: Recipe, key: str, where: str) -> None:
    """A scheduled setting is not also given a value in its section."""
    section, _, field = key.partition(".")
    if field in recipe.section(section):
        raise RecipeError(
            f"schedules.{key}: {key} is also set as a value; give it one or the other", where=where
        )


def check_starts(recipe: Recipe, where: str) -> None:
    """The active algorithm's settings that must start above 0 do."""
    for key, why in ALGORITHMS[recipe.algorithm].STARTS_ABOVE_ZERO.items():
        schedule = recipe.schedules.get(key)
        if schedule is not None and schedule.value_at(0) <= 0:
            raise RecipeError(f"schedules.{key}: must start above 0: {why}", where=where)
