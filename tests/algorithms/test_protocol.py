"""Every registered algorithm module provides every name of the `Algorithm` protocol."""

from __future__ import annotations

import inspect

import pytest

from llm_rl.algorithms.base import Algorithm
from llm_rl.algorithms.registry import ALGORITHMS

PROTOCOL_NAMES = sorted(
    {*Algorithm.__annotations__, *(name for name, _ in inspect.getmembers(Algorithm, inspect.isfunction))}
    - {name for name in dir(object)}
    - {"_is_protocol", "_is_runtime_protocol"}
)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_each_algorithm_module_answers_the_whole_protocol(name: str) -> None:
    module = ALGORITHMS[name]
    missing = [attribute for attribute in PROTOCOL_NAMES if not hasattr(module, attribute)]
    assert not missing, f"{module.__name__} lacks {missing}"
    assert name == module.NAME


def test_the_protocol_lists_its_functions() -> None:
    assert {"variant", "flat_reward_hint", "check_recipe", "NAME", "METRIC_NAMES"} <= set(PROTOCOL_NAMES)
