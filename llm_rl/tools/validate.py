"""`llm-rl validate`: load everything a recipe names, run its rewards on one row, train nothing."""

from __future__ import annotations

from typing import Any

from llm_rl.algorithms.base import Components
from llm_rl.algorithms.preflight import preflight
from llm_rl.algorithms.registry import ALGORITHMS
from llm_rl.recipe.stages import stage_recipes
from llm_rl.schema import Recipe
from llm_rl.training.args import save_every_steps, steps_for_budget


def reward_columns_of(row: dict[str, Any]) -> dict[str, list[Any]]:
    """One dataset row as the column lists a reward function receives."""
    return {key: [value] for key, value in row.items() if key != "prompt"}


def try_rewards(components: Components) -> list[str]:
    """Call every reward function on the first training row with an empty completion."""
    row = components.data.train[0]
    prompt = row["prompt"]
    empty = "" if isinstance(prompt, str) else [{"role": "assistant", "content": ""}]
    lines = []
    for name, function, weight in zip(
        components.rewards.names, components.rewards.functions, components.rewards.weights, strict=True
    ):
        value = function(prompts=[prompt], completions=[empty], completion_ids=[[]], **reward_columns_of(row))
        lines.append(f"  {name:<24} weight {weight:<6g} on row 0 with an empty completion: {value[0]}")
    return lines


def describe_run(recipe: Recipe) -> str:
    """A summary of what `llm-rl train` would run, after loading all of it (a staged recipe: its first
    stage in full, and every stage's algorithm, budget and trainer config)."""
    if recipe.stages:
        return describe_stages(recipe)
    checked = preflight(recipe)
    algorithm, components = checked.algorithm, checked.components
    per_step = algorithm.samples_per_step(recipe)
    steps = steps_for_budget(recipe, per_step)
    data = components.data
    evaluation = components.held_out
    parameters = sum(p.numel() for p in components.policy.parameters())
    variant = algorithm.variant(recipe.to_dict())
    lines = [
        f"recipe OK: {recipe.algorithm.upper()} run {recipe.run_name!r}{f' ({variant})' if variant else ''} "
        f"-> {recipe.output_dir}",
        f"model     {recipe.model.policy} ({parameters:,} parameters) from {components.policy_path}",
        f"data      {recipe.data.label}: {len(data.train)} training prompts"
        + (f", {len(data.eval)} eval prompts" if data.eval is not None else "")
        + (f", {data.dropped_too_long} dropped as too long" if data.dropped_too_long else ""),
        f"columns   to rewards: {', '.join(data.reward_columns) or '(none)'}",
        evaluation_line(recipe, len(data.eval) if evaluation is not None and data.eval is not None else None),
        f"budget    {steps} updates x {per_step} samples = {steps * per_step} samples",
        f"saving    every {save_every_steps(recipe, per_step)} updates "
        f"({recipe.checkpointing.every} {recipe.checkpointing.unit}), keep last {recipe.checkpointing.keep_last}",
        "rewards",
        *try_rewards(components),
    ]
    return "\n".join(lines)


def evaluation_line(recipe: Recipe, prompts: int | None) -> str:
    """When the held-out reward is measured, and on how many prompts; `prompts` None: never."""
    if prompts is None:
        return "eval      none (evaluation.every is not set)"
    settings = recipe.evaluation
    when = [f"every {settings.every} updates"] if settings.every is not None else []
    when += ["before the first update"] if settings.at_start else []
    return f"eval      {' and '.join(when)} on {prompts} held-out prompts"


def describe_stages(recipe: Recipe) -> str:
    """The first stage described in full, then one line per stage (each stage's trainer config built)."""
    stages = stage_recipes(recipe)
    lines = [describe_run(stages[0]), f"stages    {len(stages)}, into {recipe.output_dir}"]
    for index, (entry, stage) in enumerate(zip(recipe.stages, stages, strict=True)):
        algorithm = ALGORITHMS[stage.algorithm]
        algorithm.trainer_config(stage)
        per_step = algorithm.samples_per_step(stage)
        steps = steps_for_budget(stage, per_step)
        changes = ", ".join(sorted(entry.overrides)) or "none"
        lines.append(
            f"  {index:02d} {entry.name:<20} {stage.algorithm.upper():<5} {steps} updates x {per_step} samples "
            f"= {steps * per_step} samples; overrides: {changes}"
        )
    return "\n".join(lines)
