"""The built-in reward factories: `accuracy`, `format` and `length` (`reward_model` has its own module).

Each factory takes the recipe entry's extra keys as typed keyword arguments (checked by pydantic) and
returns a reward function with TRL's GRPO signature whose `__name__` is the metric name.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, validate_call

from llm_rl.errors import RewardError
from llm_rl.rewards.answers import final_answer, gold_is_math, math_equal
from llm_rl.rewards.base import RewardFunction, RewardParameterError, completion_text, dataset_columns

# Factory parameters are checked strictly: a recipe's "8" is not the number 8.
STRICT = ConfigDict(strict=True)

# open-r1's format: reasoning in <think>, then the answer in <answer>, each tag on its own line.
THINK_ANSWER_PATTERN = r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$"


def column(kwargs: dict[str, Any], name: str, reward: str) -> list[Any]:
    """A dataset column from a reward call's keyword arguments, or an error naming what is there."""
    if name not in kwargs:
        given = ", ".join(dataset_columns(kwargs)) or "none"
        raise RewardError(f"reward {reward!r} needs the dataset column {name!r} (columns given: {given})")
    return kwargs[name]


def score_answer(mode: str, gold: Any, completion: str) -> float | None:
    """1.0 / 0.0 for one completion against its ground truth; None where there is no ground truth."""
    if gold is None:
        return None
    gold = str(gold)
    if mode == "exact":
        return float(completion.strip() == gold.strip())
    if gold_is_math(gold):
        return float(math_equal(gold, completion))
    if mode == "math":
        return None
    return float(final_answer(completion, numeric=False) == gold.strip())


@validate_call(config=STRICT)
def accuracy_reward(
    mode: Literal["auto", "math", "exact"] = "auto", answer_column: str = "answer"
) -> RewardFunction:
    """Whether the completion's final answer equals the ground truth in `answer_column` (1.0 / 0.0).

    `exact`: the stripped completion equals the stripped ground truth (the arithmetic task: `7`).
    `math`: the final answer (`\\boxed{}`, "answer is", `####`, last number) equals the ground truth as a
    number or by math-verify; a ground truth that is not math gives None (not applicable).
    `auto`: `math` where the ground truth is math, else the final answer as text equals it exactly.
    """

    def reward(prompts: list[Any], completions: list[Any], completion_ids: Any = None, **kwargs: Any):
        golds = column(kwargs, answer_column, "accuracy")
        return [
            score_answer(mode, gold, completion_text(c)) for gold, c in zip(golds, completions, strict=True)
        ]

    reward.__name__ = "accuracy"
    return reward


def compile_pattern(pattern: str, dotall: bool) -> re.Pattern[str]:
    """The compiled regex, or an error naming the pattern and what is wrong with it."""
    try:
        return re.compile(pattern, re.DOTALL if dotall else 0)
    except re.error as err:
        raise RewardParameterError("pattern", f"not a valid regular expression {pattern!r} ({err})") from None


@validate_call(config=STRICT)
def format_reward(
    pattern: str = THINK_ANSWER_PATTERN,
    mode: Literal["match", "fullmatch", "search"] = "match",
    dotall: bool = True,
) -> RewardFunction:
    """1.0 where the completion matches `pattern` (anchored at the start by `match`), else 0.0.

    The default is open-r1's `<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>`; `dotall` lets `.` span
    lines; `mode` picks re.match, re.fullmatch or re.search.
    """
    regex = compile_pattern(pattern, dotall)
    matcher = getattr(regex, mode)

    def reward(prompts: list[Any], completions: list[Any], completion_ids: Any = None, **kwargs: Any):
        return [float(matcher(completion_text(c)) is not None) for c in completions]

    reward.__name__ = "format"
    return reward


def length_penalty(length: int, target: int, tolerance: float) -> float:
    """0 within `tolerance` of `target`, then falling linearly to -1 at a distance of tolerance + target."""
    excess = max(0.0, abs(length - target) - tolerance)
    return -min(1.0, excess / target)


@validate_call(config=STRICT)
def length_reward(
    target: Annotated[int, Field(gt=0)],
    unit: Literal["characters", "tokens"] = "characters",
    tolerance: Annotated[float, Field(ge=0)] = 0.0,
) -> RewardFunction:
    """A penalty in [-1, 0] for completions longer or shorter than `target`.

    reward = -min(1, max(0, |length - target| - tolerance) / target); length in characters of the
    completion text, or in tokens (`unit: tokens`, from the `completion_ids` the trainer passes).
    """

    def reward(prompts: list[Any], completions: list[Any], completion_ids: Any = None, **kwargs: Any):
        if unit == "tokens":
            if completion_ids is None:
                raise RewardError("reward 'length' with unit 'tokens' needs completion_ids from the trainer")
            lengths = [len(ids) for ids in completion_ids]
        else:
            lengths = [len(completion_text(c)) for c in completions]
        return [length_penalty(n, target, tolerance) for n in lengths]

    reward.__name__ = "length"
    return reward
