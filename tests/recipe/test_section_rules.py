"""The rules between a section's keys are the section's own validators: they hold wherever the section
is built, and the loader shows their message as it is, after the file's name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from llm_rl.errors import RecipeError
from llm_rl.recipe import load as load_module
from llm_rl.recipe.load import load_recipe
from llm_rl.recipe.stages import stage_recipes
from llm_rl.schema import DataSection, GenerationSection, Recipe, RuleBroken, TrainingSection

SECTION_RULES = {
    "two budgets": (
        TrainingSection,
        {"max_steps": 3, "total_samples": 64},
        "training.max_steps and training.total_samples both set: give one budget, in updates or in samples",
    ),
    "min above max": (
        GenerationSection,
        {"max_new_tokens": 4, "min_new_tokens": 8},
        "generation.min_new_tokens (8) is above generation.max_new_tokens (4)",
    ),
    "mixture and source": (
        DataSection,
        {"source": "a.jsonl", "sources": [{"source": "b.jsonl"}]},
        "data.sources and data.source both set",
    ),
    "some weights": (
        DataSection,
        {"sources": [{"source": "a.jsonl", "weight": 1.0}, {"source": "b.jsonl"}]},
        "data.sources[1].weight: set a weight on every source or on none",
    ),
    "eval split and size": (
        DataSection,
        {"eval_split": "test", "eval_size": 10},
        "data.eval_split and data.eval_size both set",
    ),
}


@pytest.mark.parametrize(("section", "keys", "message"), SECTION_RULES.values(), ids=SECTION_RULES)
def test_a_section_refuses_keys_that_conflict_without_the_loader(
    section: type, keys: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        section.model_validate(keys)
    broken = caught.value.errors()[0]["ctx"]["error"]
    assert isinstance(broken, RuleBroken) and str(broken).startswith(message)


def test_a_rule_across_sections_is_the_recipes_own() -> None:
    with pytest.raises(ValidationError, match="must be a multiple of training.logging_steps"):
        Recipe.model_validate({"evaluation": {"every": 3}, "training": {"logging_steps": 2}})
    with pytest.raises(ValidationError, match="'accuracy' appears twice"):
        Recipe.model_validate({"rewards": [{"name": "accuracy"}, {"name": "accuracy", "weight": 0.5}]})


def test_the_loader_shows_a_broken_rule_after_the_file_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text("generation: {max_new_tokens: 4, min_new_tokens: 8}\n")
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    assert (
        str(caught.value) == f"{path}: generation.min_new_tokens (8) is above generation.max_new_tokens (4)"
    )


STAGED = "algorithm: grpo\nstages:\n  - {name: first, max_steps: 2}\n  - {name: second, max_steps: 3}\n"


def test_stages_are_validated_once_when_the_recipe_loads(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "staged.yaml"
    path.write_text(STAGED)
    validated: list[str] = []
    validate = load_module.validate_recipe

    def counting(raw: dict[str, Any], where: str, as_source: bool = False) -> Recipe:
        validated.append(where)
        return validate(raw, where, as_source)

    monkeypatch.setattr(load_module, "validate_recipe", counting)
    recipe = load_recipe(path, [f"run.output_dir={tmp_path / 'run'}"])
    assert validated == [str(path), f"{path}: stages[0] (first)", f"{path}: stages[1] (second)"]
    stages = stage_recipes(recipe)
    # The run and `llm-rl validate` read the stages the loader kept: nothing is validated again.
    assert stage_recipes(recipe) is stages and len(validated) == 3
    assert [stage.training.max_steps for stage in stages] == [2, 3]
    assert [Path(stage.output_dir).name for stage in stages] == ["00-first", "01-second"]


def test_stages_of_a_recipe_the_loader_never_saw_are_refused() -> None:
    recipe = Recipe.model_validate({"stages": [{"name": "first", "max_steps": 2}]})
    with pytest.raises(ValueError, match="were not expanded"):
        stage_recipes(recipe)
