"""The built-in task `builtin:arithmetic` (llm_rl.data.tasks) through the data loader: true answers, seeded draws,
the operand range, and a close name suggested for an unknown task."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from llm_rl.schema import DataSection
from tests.data.conftest import SUM, data_error, load, rows_of, small_arithmetic


def test_arithmetic_has_train_and_eval_with_true_answers(tokenizer) -> None:
    data = load(tokenizer, **small_arithmetic())
    assert len(data.train) == 60
    assert data.eval is not None and len(data.eval) == 20
    assert data.train.column_names == ["prompt", "answer"]
    assert data.reward_columns == ["answer"]
    assert data.dropped_too_long == 0
    for row in [*data.train, *data.eval]:
        a, b = map(int, SUM.match(row["prompt"]).groups())
        assert row["answer"] == str(a + b)
        assert 0 <= a <= 9 and 0 <= b <= 9


def test_arithmetic_is_deterministic_by_seed(tokenizer) -> None:
    first = load(tokenizer, seed=7, **small_arithmetic())
    again = load(tokenizer, seed=7, **small_arithmetic())
    other = load(tokenizer, seed=8, **small_arithmetic())
    assert rows_of(first.train) == rows_of(again.train)
    assert rows_of(first.eval) == rows_of(again.eval)
    assert first.train["prompt"] != other.train["prompt"]
    assert first.eval["prompt"] != other.eval["prompt"]


def test_arithmetic_train_and_eval_are_different_draws(tokenizer) -> None:
    data = load(tokenizer, **small_arithmetic(num_train=20, num_eval=20))
    assert data.train["prompt"] != data.eval["prompt"]


def test_arithmetic_num_eval_zero_means_no_eval(tokenizer) -> None:
    data = load(tokenizer, **small_arithmetic(num_eval=0))
    assert data.eval is None
    assert len(data.train) == 60


def test_arithmetic_respects_the_operand_range(tokenizer) -> None:
    data = load(tokenizer, **small_arithmetic(min_operand=10, max_operand=12, num_train=400))
    pairs = set()
    for row in [*data.train, *data.eval]:
        a, b = map(int, SUM.match(row["prompt"]).groups())
        assert 10 <= a <= 12 and 10 <= b <= 12
        assert row["answer"] == str(a + b)
        pairs.add((a, b))
    # 420 uniform draws over 9 pairs: every pair shows up (missing one has probability ~1e-21).
    assert pairs == {(a, b) for a in range(10, 13) for b in range(10, 13)}


def test_arithmetic_inverted_range_is_a_data_error(tokenizer) -> None:
    message = data_error(tokenizer, **small_arithmetic(min_operand=8, max_operand=3))
    assert message.startswith("builtin:arithmetic: ")
    assert "min_operand (8)" in message and "max_operand (3)" in message


def test_unknown_builtin_task_suggests_the_close_one(tokenizer) -> None:
    message = data_error(tokenizer, source="builtin:arithmetc")
    assert message.startswith("builtin:arithmetc: unknown built-in task")
    assert "did you mean 'builtin:arithmetic'?" in message
    far = data_error(tokenizer, source="builtin:zzz")
    assert "did you mean" not in far and "known: builtin:arithmetic" in far


def test_arithmetic_template_puts_the_operands_in_words(tokenizer) -> None:
    template = "What is {a} + {b}? Reply with the number only."
    data = load(tokenizer, **small_arithmetic(template=template, min_operand=10, max_operand=49))
    words = re.compile(r"^What is (\d+) \+ (\d+)\? Reply with the number only\.$")
    for row in [*data.train, *data.eval]:
        a, b = map(int, words.match(row["prompt"]).groups())
        assert 10 <= a <= 49 and 10 <= b <= 49
        assert row["answer"] == str(a + b)
    # The template changes the text only: the same seed draws the same operands as the default template.
    plain = load(tokenizer, **small_arithmetic(min_operand=10, max_operand=49))
    assert [words.match(p).groups() for p in data.train["prompt"]] == [
        SUM.match(p).groups() for p in plain.train["prompt"]
    ]


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("{a} plus {c}", "not {c}"),
        ("{a.__class__}+{b}", "not {a.__class__}"),
        ("{a:>5}+{b}", "not {a}"),
        ("{a}+{b!r}", "not {b}"),
        ("{0}+{b}", "not {0}"),
        ("What is {a} doubled?", "has no {b}"),
        ("{a}+{b}={", "Single '{'"),
    ],
)
def test_arithmetic_template_takes_only_the_two_operands(template: str, problem: str) -> None:
    with pytest.raises(ValidationError) as caught:
        DataSection(source="builtin:arithmetic", arithmetic={"template": template})
    assert problem in str(caught.value)
    assert "arithmetic.template" in str(caught.value)
