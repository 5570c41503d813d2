"""What `llm-rl train` and `llm-rl validate` both do before a run folder is touched: load everything the
recipe names and let the algorithm refuse what it cannot run. Every error here is the user's to fix
(exit code 2), and nothing has been written yet."""

from __future__ import annotations

from dataclasses import dataclass

from llm_rl.algorithms.base import Algorithm, Components, build_components
from llm_rl.algorithms.registry import algorithm_named
from llm_rl.schema import Recipe
from llm_rl.training.evaluation import held_out_reward


@dataclass
class Preflight:
    """A recipe's algorithm and its loaded components, checked: what a trainer is built from."""

    algorithm: Algorithm
    components: Components


def preflight(recipe: Recipe) -> Preflight:
    """Tokenizer, prompts, rewards and policy; the trainer's config (its own refusals); what the algorithm
    loads beyond the components (PPO: critic, reference); the held-out evaluator."""
    components = build_components(recipe)
    algorithm = algorithm_named(recipe.algorithm)
    algorithm.trainer_config(recipe)  # built to be refused here, not after the run folder is made
    algorithm.prepare(components)
    components.held_out = held_out_reward(components)  # refuses evaluation.every without eval prompts
    return Preflight(algorithm, components)
