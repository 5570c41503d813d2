"""Final answers of math completions, and whether they equal a ground truth (GSM8K, MATH-style).

A completion's final answer is found in this order: the last `\\boxed{...}`; else, inside the last
`<answer>...</answer>` if any, the last "answer is X" / "answer: X" / "#### X" marker, or the whole tag;
else the last such marker in the text; else, for a numeric ground truth, the last number in the text
(otherwise the whole text). A ground truth is what follows GSM8K's `####`, else its last `\\boxed{...}`,
else the whole string.

Two answers that both read as plain numbers ("$1,000", "18.00", "3/4", "18 dollars", "\\frac{3}{4}")
are compared as exact fractions, rounded to 6 decimals as math-verify does; that is fast and is what
GSM8K needs. Anything else (expressions, LaTeX, sets) goes to math-verify's `parse` and `verify`.
"""

from __future__ import annotations

import re
import threading
from fractions import Fraction
from functools import lru_cache
from typing import Any

from math_verify import parse, verify

# math-verify bounds each parse/verify with signal.alarm, which works only on the main thread; off it,
# the bound is off (math-verify would raise otherwise) and the short spans we hand it parse quickly.
MATH_VERIFY_TIMEOUT_S = 5

NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|[-+]?\.\d+"
LATEX_FRACTION = re.compile(rf"\\[dt]?frac\s*\{{\s*({NUMBER})\s*\}}\s*\{{\s*({NUMBER})\s*\}}")
# The last-number fallback: a number, a fraction a/b, or \frac{a}{b}.
NUMBER_TOKEN = re.compile(rf"{LATEX_FRACTION.pattern}|(?:{NUMBER})(?:\s*/\s*(?:{NUMBER}))?")
PLAIN_NUMBER = re.compile(rf"({NUMBER})(?:/({NUMBER}))?")
# "The answer is 18.", "Final Answer: 18", "**Answer:** $18", "#### 18": the span runs to the line's end.
ANSWER_MARKER = re.compile(r"\banswer\b[*_\s]*(?:is\b|:|=)[*_:\s]*|####[ \t]*", re.IGNORECASE)
ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
SENTENCE_END = re.compile(r"[.!?;](?:\s|$)|\n")
LATEX_TEXT = re.compile(r"\\(?:text|textbf|textrm|mathrm|mbox)\s*\{([^{}]*)\}")
LATEX_SPACE = re.compile(r"\\[,!;: ]|\\quad|\\qquad")
NUMBER_CHUNK = re.compile(r"[\w.,/+-]*\d[\w.,/+-]*")
# What makes a span look like math rather than words: digits, LaTeX, powers.
MATH_SIGN = re.compile(r"[\d\\^]")


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`), braces balanced; None if there is none."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    opening = text.find("{", start)
    if opening < 0:
        return None
    depth = 0
    for index in range(opening, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return text[opening + 1 : index].strip()
    return None


def marked_answer(text: str) -> str | None:
    """The sentence after the last "answer is" / "answer:" / "####" marker; None if there is none."""
    markers = list(ANSWER_MARKER.finditer(text))
    if not markers:
        return None
    rest = text[markers[-1].end() :]
    end = SENTENCE_END.search(rest)
    span = (rest[: end.start()] if end else rest).strip()
    return span or None


def final_answer(text: str, numeric: bool = True) -> str | None:
    """The span of a completion that holds its final answer (module docstring); None if it has none.

    For a `numeric` ground truth, a marker whose span has no digit and no LaTeX ("the answer is not
    obvious") is passed over for the last number; otherwise the whole text is the last resort.
    """
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    tags = ANSWER_TAG.findall(text)
    if tags:
        return marked_answer(tags[-1]) or tags[-1].strip()
    marked = marked_answer(text)
    if not numeric:
        return marked or text.strip()
    if marked is not None and MATH_SIGN.search(marked):
        return marked
    numbers = list(NUMBER_TOKEN.finditer(text))
    return numbers[-1].group(0) if numbers else None


def gold_span(text: str) -> str:
    """The answer part of a ground truth: after GSM8K's last `####`, else the last `\\boxed{}`, else all."""
    if "####" in text:
        return text.rsplit("####", 1)[1].strip().split("\n", 1)[0].strip()
    boxed = last_boxed(text)
    return (boxed if boxed is not None else text).strip()


def clean_span(span: str) -> str:
    """Drop what models put around a number: $, \\$, %, \\text{units}, thin spaces, bold, a final period."""
    text = span.replace("\u2212", "-").replace("{,}", ",").replace("\u00a0", " ")
    text = LATEX_TEXT.sub(r" \1", text)
    text = LATEX_FRACTION.sub(r"\1/\2", text)
    text = LATEX_SPACE.sub("", text)
    text = text.replace("\\$", "").replace("\\%", "").replace("$", "").replace("%", "")
    text = re.sub(r"\s*/\s*", "/", text)
    return text.strip(" \t\n*_`'\".,:")


@lru_cache(maxsize=65536)
def as_number(span: str) -> Fraction | None:
    """The span's value if it reads as one plain number or fraction (units and words around it allowed)."""
    text = clean_span(span)
    if re.search(r"[\\^{}]", text):
        return None
    chunks = NUMBER_CHUNK.findall(text.rsplit("=", 1)[-1])
    if len(chunks) != 1:
        return None
    match = PLAIN_NUMBER.fullmatch(chunks[0].rstrip(".,"))
    if match is None:
        return None
    value = Fraction(match[1].replace(",", ""))
    if match[2] is None:
        return value
    denominator = Fraction(match[2].replace(",", ""))
    return value / denominator if denominator else None


def math_verify_timeout() -> int | None:
    """math-verify's signal-based timeout where it works (the main thread), None elsewhere."""
    return MATH_VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


@lru_cache(maxsize=65536)
def parse_math(span: str) -> tuple[Any, ...]:
    """math-verify's parse of an answer span, as inline LaTeX first (so `2x+1` stays whole); () if none."""
    timeout = math_verify_timeout()
    parsed = [] if "$" in span else parse(f"${span}$", parsing_timeout=timeout)
    return tuple(parsed or parse(span, parsing_timeout=timeout))


def numbers_equal(gold: Fraction, predicted: Fraction) -> bool:
    """Exact equality, or equality at 6 decimals (math-verify's float_rounding) for decimals."""
    return gold == predicted or round(gold, 6) == round(predicted, 6)


def gold_is_math(gold: str) -> bool:
    """Whether a ground truth reads as math: a number, or digits / LaTeX / powers math-verify parses.

    Words alone ("Paris", "B") are not math: math-verify would read them as products of symbols.
    """
    span = gold_span(gold)
    return as_number(span) is not None or (MATH_SIGN.search(span) is not None and bool(parse_math(span)))


def math_equal(gold: str, completion: str) -> bool:
    """Whether the completion's final answer equals the ground truth's, as numbers or by math-verify."""
    expected = gold_span(gold)
    gold_number = as_number(expected)
    predicted = final_answer(completion, numeric=gold_number is not None)
    if predicted is None:
        return False
    predicted_number = as_number(predicted)
    if gold_number is not None and predicted_number is not None:
        return numbers_equal(gold_number, predicted_number)
    gold_parsed, predicted_parsed = parse_math(expected), parse_math(predicted)
    if not gold_parsed or not predicted_parsed:
        return False
    return verify(list(gold_parsed), list(predicted_parsed), timeout_seconds=math_verify_timeout())
