"""A staged recipe's stages as whole recipes: the recipe, the stage's overrides, its budget and its folder.

They are built and validated once, when the recipe is loaded (`expand_stages`, from
`llm_rl.recipe.load.validate_recipe`), and kept on the recipe; `llm-rl validate` and the staged run
(`llm_rl.run.stages`) read them with `stage_recipes`.
"""

from __future__ import annotations

from collections.abc import Callable

from llm_rl.errors import RecipeError
from llm_rl.recipe.files import deep_merge
from llm_rl.run_folder import stage_folder
from llm_rl.schema import Recipe, StageEntry

# Keys a stage may not override: a stage continues the run's policy in the run's folder.
STAGE_FIXED_KEYS = {
    "run": "stages share the run's name, folder and seed",
    "model": "a stage continues the previous stage's policy; model settings are the recipe's",
    "stages": "stages do not nest",
    "extends": "extends belongs at the top of a recipe file",
}
STAGE_FIXED_DOTTED = {
    "training.max_steps": "give the stage's budget as its own max_steps or total_samples",
    "training.total_samples": "give the stage's budget as its own max_steps or total_samples",
    "checkpointing.resume": "a staged run resumes stage by stage by itself",
}

# Validates one stage's whole recipe (`llm_rl.recipe.load.validate_recipe`), its errors named by the label.
Validate = Callable[[dict, str], Recipe]


def expand_stages(recipe: Recipe, where: str, validate: Validate) -> None:
    """Build every stage's recipe into the run folder's `stages/`, validate each, and keep them on the
    recipe."""
    names = [stage.name for stage in recipe.stages]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise RecipeError(f"stages: the name {repeated[0]!r} is used twice", where=where)
    base = {key: value for key, value in recipe.to_dict().items() if key != "stages"}
    stages = []
    for index, stage in enumerate(recipe.stages):
        label = f"stages[{index}] ({stage.name})"
        check_stage(stage, label, where)
        raw = deep_merge(base, stage.overrides)
        raw["training"].update(max_steps=stage.max_steps, total_samples=stage.total_samples)
        raw["run"]["output_dir"] = str(stage_folder(recipe.output_dir, index, stage.name))
        raw["checkpointing"]["resume"] = "auto"
        stages.append(validate(raw, f"{where}: {label}"))
    recipe._stage_recipes = stages


def check_stage(stage: StageEntry, label: str, where: str) -> None:
    """One budget, and no override of what the stages share."""
    if (stage.max_steps is None) == (stage.total_samples is None):
        raise RecipeError(f"{label}: give one budget, max_steps or total_samples", where=where)
    for key, reason in STAGE_FIXED_KEYS.items():
        if key in stage.overrides:
            raise RecipeError(f"{label}.overrides.{key}: cannot change in a stage: {reason}", where=where)
    for dotted, reason in STAGE_FIXED_DOTTED.items():
        section, _, field = dotted.partition(".")
        if field in (stage.overrides.get(section) or {}):
            raise RecipeError(f"{label}.overrides.{dotted}: {reason}", where=where)


def stage_recipes(recipe: Recipe) -> list[Recipe]:
    """The stages the loader built and validated, in order."""
    if len(recipe._stage_recipes) != len(recipe.stages):
        raise ValueError("the recipe's stages were not expanded: load it with llm_rl.recipe.load")
    return recipe._stage_recipes
