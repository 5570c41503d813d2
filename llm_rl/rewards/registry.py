"""Reward names to factories, import paths to user functions, and recipe entries to checked functions."""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from llm_rl.errors import RewardError, did_you_mean
from llm_rl.rewards.base import RewardFunction, RewardParameterError
from llm_rl.rewards.builtins import accuracy_reward, format_reward, length_reward
from llm_rl.rewards.checked import CheckedReward
from llm_rl.rewards.remote import http_reward
from llm_rl.rewards.reward_model import reward_model_reward
from llm_rl.schema import RewardEntry

REWARDS: dict[str, Callable[..., RewardFunction]] = {
    "accuracy": accuracy_reward,
    "format": format_reward,
    "length": length_reward,
    "reward_model": reward_model_reward,
    "http": http_reward,
}

# Arguments the trainer passes itself: a recipe key of these names would clash with them.
CALL_ARGUMENTS = ("prompts", "completions", "completion_ids")


@dataclass
class RewardSet:
    """A recipe's reward functions, in order, with their weights and metric names."""

    functions: list[CheckedReward]
    weights: list[float]
    names: list[str]


def parameters_of(function: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    """The parameters a recipe key can set: named, keyword-capable ones."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {n: p for n, p in inspect.signature(function).parameters.items() if p.kind in kinds}


def check_keys(kwargs: dict[str, Any], accepted: list[str], owner: str) -> None:
    """Every recipe key must name a parameter; the error names the key, the owner and what is accepted."""
    for key in kwargs:
        if key not in accepted:
            hint = did_you_mean(key, accepted)
            listed = ", ".join(accepted) or "none"
            raise RewardParameterError(key, f"not a parameter of {owner}{hint}; it accepts: {listed}")


def error_key(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as the dotted recipe key, without the union-member tags pydantic adds
    (`normalize.Normalization.std` -> `normalize.std`)."""
    return ".".join(
        str(part) for part in loc if not (str(part)[:1].isupper() or str(part).startswith("literal["))
    )


def build_builtin(name: str, kwargs: dict[str, Any]) -> RewardFunction:
    """Call a registered factory with the recipe's keys, turning pydantic's first complaint into ours."""
    factory = REWARDS[name]
    check_keys(kwargs, list(parameters_of(factory)), f"reward {name!r}")
    try:
        return factory(**kwargs)
    except ValidationError as err:
        first = err.errors()[0]
        key = error_key(first["loc"])
        given = "" if first["type"].startswith("missing") else f", got {first.get('input')!r}"
        raise RewardParameterError(key, f"{first['msg'].lower()}{given}") from None


def import_function(path: str) -> Callable[..., Any]:
    """The function an import path `package.module:function` names; errors name the path and cause."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute.isidentifier():
        raise RewardParameterError("name", f"{path!r}: expected an import path package.module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise RewardParameterError(
            "name", f"cannot import module {module_name!r} ({err}; is its folder on PYTHONPATH?)"
        ) from None
    except Exception as err:  # the module's own code failed while importing
        raise RewardParameterError(
            "name", f"cannot import module {module_name!r} ({type(err).__name__}: {err})"
        ) from None
    if not hasattr(module, attribute):
        raise RewardParameterError("name", f"module {module_name!r} has no attribute {attribute!r}")
    function = getattr(module, attribute)
    if not callable(function):
        raise RewardParameterError("name", f"{path} is a {type(function).__name__}, not a function")
    return function


def build_user_function(path: str, kwargs: dict[str, Any]) -> RewardFunction:
    """A user's reward function by import path, with the recipe's keys bound by functools.partial."""
    function = import_function(path)
    parameters = inspect.signature(function).parameters.values()
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        raise RewardParameterError(
            "name",
            f"{path} must accept **kwargs: the trainer passes every dataset column as a keyword argument",
        )
    settable = [n for n in parameters_of(function) if n not in CALL_ARGUMENTS]
    check_keys(kwargs, settable, path)
    return functools.partial(function, **kwargs) if kwargs else function


def unknown_name(name: str) -> RewardParameterError:
    """The error for a name that is neither registered nor an import path, with the closest match."""
    hint = did_you_mean(name, REWARDS, cutoff=0.5)
    return RewardParameterError(
        "name",
        f"unknown reward {name!r}{hint}; registered: {', '.join(REWARDS)}, "
        f"or an import path package.module:function",
    )


def build_entry(entry: RewardEntry, where: str) -> CheckedReward:
    """One recipe entry as a checked reward function; errors are prefixed with `where` (`rewards[i]`)."""
    try:
        if ":" in entry.name:
            function = build_user_function(entry.name, entry.kwargs)
        elif entry.name in REWARDS:
            function = build_builtin(entry.name, entry.kwargs)
        else:
            raise unknown_name(entry.name)
    except RewardParameterError as err:
        raise RewardError(f"{where}.{err.key}: {err.detail}") from None
    return CheckedReward(function, entry.metric_name, entry.on_invalid)


def build_reward_functions(entries: list[RewardEntry]) -> RewardSet:
    """The recipe's `rewards:` list as checked functions, weights and metric names, in order."""
    functions = [build_entry(entry, f"rewards[{index}]") for index, entry in enumerate(entries)]
    return RewardSet(functions, [e.weight for e in entries], [f.__name__ for f in functions])


def get_reward(
    name: str, *, on_invalid: Literal["error", "skip"] = "error", alias: str | None = None, **kwargs: Any
) -> CheckedReward:
    """The reward function a recipe's `rewards:` entry names, built from Python (DESIGN.md contract).

    `name` is a registered name or `package.module:function`; `kwargs` are the entry's other keys.
    """
    try:
        entry = RewardEntry(name=name, on_invalid=on_invalid, alias=alias, **kwargs)
    except ValidationError as err:
        first = err.errors()[0]
        key = error_key(first["loc"])
        raise RewardError(f"get_reward({name!r}).{key}: {first['msg'].lower()}") from None
    return build_entry(entry, f"get_reward({name!r})")
