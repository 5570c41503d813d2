"""When a TRL run saved checkpoints and evaluated, and which checkpoint it resumed from, as llm_rl's
`checkpointing` and `evaluation` settings."""

from __future__ import annotations

from typing import Any

from llm_rl.recipe.accounting import Migration, put


def import_saving(flat: dict[str, Any], out: Migration) -> None:
    """`save_strategy` and `save_steps`: a cadence in updates, and nothing from a run that saved nothing."""
    strategy = flat.get("save_strategy", "steps")
    if "save_strategy" in flat:
        if strategy == "steps" and "save_steps" in flat:
            out.keep("save_strategy", strategy, "checkpointing.unit", "every save_steps updates")
        else:
            why = {
                "no": "the source saved no checkpoints",
                "steps": "TRL's default save_steps is not carried",
            }.get(strategy, "checkpointing.every counts samples or steps, not epochs")
            out.warn(
                "save_strategy",
                strategy,
                f"{why}: llm_rl checkpoints every checkpointing.every (default 100,000 samples)",
            )
    if "save_steps" in flat and import_cadence(flat, "save_steps", "save_strategy", strategy, out):
        put(out.recipe, "checkpointing.every", flat["save_steps"])
        put(out.recipe, "checkpointing.unit", "steps")
        out.keep("save_steps", flat["save_steps"], "checkpointing.every", "unit: steps")


def import_resume(flat: dict[str, Any], out: Migration) -> None:
    """`resume_from_checkpoint`: false or null never resumes, true the latest checkpoint, a path that one."""
    if "resume_from_checkpoint" not in flat:
        return
    value = flat["resume_from_checkpoint"]
    if isinstance(value, str):
        resume = value
    elif value is True:
        resume = "auto"
    elif value is False or value is None:
        resume = "never"
    else:
        out.warn("resume_from_checkpoint", value, "neither a path nor true/false: not carried")
        return
    put(out.recipe, "checkpointing.resume", resume)
    out.keep("resume_from_checkpoint", value, "checkpointing.resume", f"{resume!r}")


def import_evaluation(flat: dict[str, Any], out: Migration) -> None:
    """`eval_strategy` (or its old name `evaluation_strategy`) and `eval_steps`: held-out reward every
    `eval_steps` updates, or never."""
    key = "eval_strategy" if "eval_strategy" in flat else "evaluation_strategy"
    strategy = flat.get(key, "steps" if "eval_steps" in flat else "no")
    if key in flat:
        if strategy == "steps":
            out.keep(key, strategy, "evaluation.every", "every eval_steps updates")
        elif strategy == "no":
            out.keep(key, strategy, "evaluation.every", "never: the source did not evaluate")
        else:
            out.warn(key, strategy, "evaluation.every counts updates, not epochs: not carried")
    if "eval_steps" in flat and import_cadence(flat, "eval_steps", key, strategy, out):
        put(out.recipe, "evaluation.every", flat["eval_steps"])
        out.keep("eval_steps", flat["eval_steps"], "evaluation.every")


def import_cadence(flat: dict[str, Any], key: str, strategy_key: str, strategy: str, out: Migration) -> bool:
    """Whether `save_steps` or `eval_steps` carries over: a whole number of updates under the `steps`
    strategy; otherwise a warning row says why not."""
    value = flat[key]
    if strategy != "steps":
        out.warn(key, value, f"not used by the source ({strategy_key} {strategy!r}): not carried")
        return False
    if not (isinstance(value, int) and value >= 1):
        out.warn(key, value, "a fraction of the run: not carried; give a number of updates")
        return False
    return True
