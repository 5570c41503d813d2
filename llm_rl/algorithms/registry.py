"""The algorithms a recipe can name, by plain imports: `algorithm: <name>` -> its module.

Adding an algorithm is one module under `llm_rl/algorithms/` that provides `base.Algorithm` (a TRL
group trainer: one `GroupTrainer` declaration), and one line here (docs/architecture.md).
"""

from __future__ import annotations

from llm_rl.algorithms.base import Algorithm
from llm_rl.algorithms.grpo import GRPO
from llm_rl.algorithms.ppo import algorithm as ppo
from llm_rl.algorithms.rloo import RLOO
from llm_rl.errors import RecipeError

ALGORITHMS: dict[str, Algorithm] = {
    "grpo": GRPO,
    "ppo": ppo,
    "rloo": RLOO,
}


def algorithm_named(name: str) -> Algorithm:
    """The algorithm a recipe names, or an error listing the known ones."""
    if name not in ALGORITHMS:
        raise RecipeError(f"algorithm: input should be {known_names()}, got {name!r}")
    return ALGORITHMS[name]


def known_names() -> str:
    """The names as a sentence lists them: 'grpo', 'ppo' or 'rloo'."""
    quoted = [repr(name) for name in ALGORITHMS]
    return ", ".join(quoted[:-1]) + f" or {quoted[-1]}" if len(quoted) > 1 else quoted[0]
