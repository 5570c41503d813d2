"""Built-in synthetic tasks (`data.source: builtin:<name>`), generated locally and deterministically.

`arithmetic`: sums of two operands drawn from `data.arithmetic`'s range (default 0..9), prompt `3+4=`
(or `data.arithmetic.template` filled in), ground truth `7` in the `answer` column. The ideal completion is the answer followed by EOS. The
text format lives here alone (`format_prompt`, `format_answer`) so that the tiny model's tokenizer and
its supervised warm-up use exactly the task's text.

The train and eval splits are drawn with different seeds from the same pairs. With single-digit
operands there are only 100 distinct pairs, all of which the train split covers, so the eval split is
held out in sampling only: it measures the policy on the task's distribution, not on unseen pairs.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from datasets import Dataset

from llm_rl.errors import DataError, unknown_builtin
from llm_rl.schema import ArithmeticTaskSection, DataSection

# Offset of the eval split's seed from the run seed, so that the two splits are different draws.
EVAL_SEED_OFFSET = 1_000_003


DEFAULT_TEMPLATE = ArithmeticTaskSection.model_fields["template"].default


def format_prompt(a: int, b: int, template: str = DEFAULT_TEMPLATE) -> str:
    """The prompt of one sum, e.g. `3+4=` (the template is checked by the schema: only `{a}` and `{b}`)."""
    return template.format(a=a, b=b)


def format_answer(a: int, b: int) -> str:
    """The ground truth of one sum, e.g. `7`: exactly the text of the ideal completion before EOS."""
    return str(a + b)


def sample_pairs(settings: ArithmeticTaskSection, count: int, seed: int) -> list[tuple[int, int]]:
    """`count` operand pairs drawn uniformly (with replacement) from the task's range."""
    rng = random.Random(seed)
    low, high = settings.min_operand, settings.max_operand
    return [(rng.randint(low, high), rng.randint(low, high)) for _ in range(count)]


def arithmetic_dataset(pairs: list[tuple[int, int]], template: str = DEFAULT_TEMPLATE) -> Dataset:
    """A `prompt` / `answer` dataset of the given sums."""
    return Dataset.from_dict(
        {
            "prompt": [format_prompt(a, b, template) for a, b in pairs],
            "answer": [format_answer(a, b) for a, b in pairs],
        }
    )


def build_arithmetic(data: DataSection, seed: int) -> dict[str, Dataset]:
    """The arithmetic task's splits: `train`, and `eval` unless `num_eval` is 0."""
    settings = data.arithmetic
    if settings.min_operand > settings.max_operand:
        raise DataError(
            f"data.arithmetic.min_operand ({settings.min_operand}) is above max_operand "
            f"({settings.max_operand}): no operand to draw",
            where="builtin:arithmetic",
        )
    train_pairs = sample_pairs(settings, settings.num_train, seed)
    splits = {"train": arithmetic_dataset(train_pairs, settings.template)}
    if settings.num_eval:
        eval_pairs = sample_pairs(settings, settings.num_eval, seed + EVAL_SEED_OFFSET)
        splits["eval"] = arithmetic_dataset(eval_pairs, settings.template)
    return splits


# Built-in task name -> builder of its splits from the data section and the run seed.
BUILTIN_TASKS: dict[str, Callable[[DataSection, int], dict[str, Dataset]]] = {
    "arithmetic": build_arithmetic,
}


def build_task(name: str, data: DataSection, seed: int) -> dict[str, Dataset]:
    """The splits of the built-in task `name`; an unknown name is a DataError listing the known ones."""
    builder = BUILTIN_TASKS.get(name)
    if builder is None:
        raise DataError(unknown_builtin("task", name, BUILTIN_TASKS), where=f"builtin:{name}")
    return builder(data, seed)
