"""The built-in rewards on real inputs: `accuracy` on GSM8K's answers and on final answers as models write them,
`format` and `length`."""

from __future__ import annotations

import json

import pytest

from llm_rl.errors import RewardError
from llm_rl.rewards import get_reward
from tests.conftest import GSM8K
from tests.rewards.conftest import call


@pytest.fixture(scope="module")
def gsm8k_rows() -> list[dict]:
    path = GSM8K / "test.jsonl"
    if not path.exists():
        pytest.skip(f"GSM8K data not found at {path}")
    return [json.loads(line) for line in path.read_text().splitlines()]


def final_number(solution: str) -> str:
    return solution.rsplit("####", 1)[1].strip()


# ----------------------------------------------------------------------------------------------------
# accuracy
# ----------------------------------------------------------------------------------------------------


def test_accuracy_reference_solutions_score_against_their_own_answer(gsm8k_rows):
    rows = gsm8k_rows[:50]
    solutions = [row["answer"] for row in rows]
    assert call(get_reward("accuracy"), solutions, answer=solutions) == [1.0] * len(rows)


def test_accuracy_reference_solutions_score_zero_against_a_different_answer(gsm8k_rows):
    rows = gsm8k_rows[:51]
    pairs = [
        (a, b)
        for a, b in zip(rows, rows[1:], strict=False)
        if final_number(a["answer"]) != final_number(b["answer"])
    ]
    completions = [a["answer"] for a, _ in pairs]
    others = [b["answer"] for _, b in pairs]
    assert call(get_reward("accuracy"), completions, answer=others) == [0.0] * len(pairs)


def test_accuracy_agrees_on_all_of_gsm8k_test(gsm8k_rows):
    solutions = [row["answer"] for row in gsm8k_rows]
    shifted = solutions[1:] + solutions[:1]
    different = [final_number(a) != final_number(b) for a, b in zip(solutions, shifted, strict=True)]
    # The same solutions with GSM8K's marker rewritten the ways models write a final answer.
    rewritten = [s.rsplit("####", 1)[0] + f"The answer is ${final_number(s)}." for s in solutions]
    reward = get_reward("accuracy")
    own = call(reward, solutions, answer=solutions)
    cross = call(reward, solutions, answer=shifted)
    phrased = call(reward, rewritten, answer=solutions)
    assert own == [1.0] * len(solutions)
    assert all(value == 0.0 for value, differs in zip(cross, different, strict=True) if differs)
    assert phrased == [1.0] * len(solutions)


@pytest.mark.parametrize(
    ("completion", "gold"),
    [
        ("The answer is 18.", "#### 18"),
        ("Adding up, she makes \\boxed{18} dollars.", "#### 18"),
        ("She makes $18", "#### 18"),
        ("18.00", "#### 18"),
        ("The total is 1,000", "#### 1000"),
        ("That costs 1000 dollars.", "#### 1,000"),
        ("The answer is 3/4", "0.75"),
        ("$\\frac{3}{4}$", "0.75"),
        ("The answer is 0.75", "\\boxed{\\frac{3}{4}}"),
        ("18 dollars", "18"),
        ("Final Answer: **18**", "18"),
        ("<think>\n9 * 2 = 18, not 17\n</think>\n<answer>\n18\n</answer>", "18"),
        ("The answer is not obvious at first. 16 - 3 - 4 = 9 eggs, 9 * 2 = 18", "#### 18"),
        ("The answer is $\\sqrt{2}$", "\\boxed{\\sqrt{2}}"),
        ("x = -5", "-5"),
        ("The answer is $2x + 1$.", "2x+1"),
        ("x^2", "x^{2}"),
    ],
)
def test_accuracy_reads_final_answers_as_models_write_them(completion, gold):
    assert call(get_reward("accuracy"), [completion], answer=[gold]) == [1.0]


@pytest.mark.parametrize(
    ("completion", "gold"),
    [
        ("The answer is 17.", "#### 18"),
        ("\\boxed{180}", "#### 18"),
        ("18 is wrong, the answer is 20", "#### 18"),
        ("no number here", "#### 18"),
        ("The answer is 0.7", "3/4"),
        ("\\boxed{\\sqrt{3}}", "\\sqrt{2}"),
        ("2x+3", "2x+1"),
    ],
)
def test_accuracy_rejects_wrong_answers(completion, gold):
    assert call(get_reward("accuracy"), [completion], answer=[gold]) == [0.0]


def test_accuracy_takes_conversational_completions():
    completions = [
        [{"role": "assistant", "content": "The answer is 18."}],
        [{"role": "assistant", "content": "7"}],
    ]
    assert call(get_reward("accuracy"), completions, answer=["#### 18", "#### 18"]) == [1.0, 0.0]


def test_accuracy_modes_and_missing_ground_truths():
    completions = ["The capital is Paris", "Paris"]
    assert call(get_reward("accuracy"), completions, answer=["Paris", "Paris"]) == [0.0, 1.0]
    assert call(get_reward("accuracy", mode="math"), completions, answer=["Paris", "Paris"]) == [None, None]
    assert call(get_reward("accuracy"), ["18"], answer=[None]) == [None]


def test_accuracy_exact_mode_on_arithmetic():
    reward = get_reward("accuracy", mode="exact")
    completions = ["7", " 7\n", "7.0", "77", "3+4=7", ""]
    assert call(reward, completions, answer=["7"] * 6) == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert call(reward, ["12"], answer=[12]) == [1.0]


def test_accuracy_answer_column_and_missing_column():
    reward = get_reward("accuracy", answer_column="solution")
    assert call(reward, ["\\boxed{4}"], solution=["4"]) == [1.0]
    with pytest.raises(RewardError, match=r"needs the dataset column 'solution' \(columns given: answer\)"):
        call(reward, ["4"], answer=["4"])


def test_accuracy_runs_off_the_main_thread():
    """math-verify's signal timeouts only work on the main thread; rewards must run elsewhere too."""
    from concurrent.futures import ThreadPoolExecutor

    reward = get_reward("accuracy")
    with ThreadPoolExecutor(1) as pool:
        values = pool.submit(call, reward, ["$\\frac{6}{8}$", "x^2"], answer=["\\frac{3}{4}", "x^2"]).result()
    assert values == [1.0, 1.0]


# ----------------------------------------------------------------------------------------------------
# format
# ----------------------------------------------------------------------------------------------------


def test_format_default_think_answer_tags():
    reward = get_reward("format")
    good = "<think>\nadd them\nover lines\n</think>\n<answer>\n7\n</answer>"
    bad = ["<answer>\n7\n</answer>", "<think>add</think><answer>7</answer>", "7", good + "\nmore text"]
    assert call(reward, [good, *bad]) == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert call(reward, [[{"role": "assistant", "content": good}]]) == [1.0]


def test_format_custom_pattern_and_modes():
    assert call(get_reward("format", pattern=r"\d+"), ["12 apples", "apples 12"]) == [1.0, 0.0]
    assert call(get_reward("format", pattern=r"\d+", mode="fullmatch"), ["12 apples", "12"]) == [0.0, 1.0]
    assert call(get_reward("format", pattern=r"\d+", mode="search"), ["apples 12"]) == [1.0]


def test_format_bad_regex_names_the_pattern():
    with pytest.raises(
        RewardError, match=r"get_reward\('format'\)\.pattern: not a valid regular expression '\(\['"
    ):
        get_reward("format", pattern="([")


# ----------------------------------------------------------------------------------------------------
# length
# ----------------------------------------------------------------------------------------------------


def test_length_penalty_in_characters():
    reward = get_reward("length", target=10)
    assert call(reward, ["x" * 10, "x" * 15, "x" * 5, "x" * 20, "x" * 100, ""]) == [
        0.0,
        -0.5,
        -0.5,
        -1.0,
        -1.0,
        -1.0,
    ]


def test_length_tolerance_and_tokens():
    reward = get_reward("length", target=10, tolerance=2)
    assert call(reward, ["x" * 12, "x" * 8, "x" * 17]) == [0.0, 0.0, -0.5]
    tokens = get_reward("length", target=4, unit="tokens")
    ids = [[1, 2, 3, 4], [1, 2], [1] * 8]
    assert tokens(prompts=["a"] * 3, completions=["long text"] * 3, completion_ids=ids) == [0.0, -0.5, -1.0]
    with pytest.raises(RewardError, match="needs completion_ids"):
        call(tokens, ["abc"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, r"get_reward\('length'\)\.target: missing required argument$"),
        ({"target": 0}, r"\.target: input should be greater than 0, got 0"),
        ({"target": "10"}, r"\.target: input should be a valid integer, got '10'"),
        ({"target": 10, "unit": "words"}, r"\.unit: input should be 'characters' or 'tokens'"),
        (
            {"target": 10, "tolerence": 1},
            r"\.tolerence: not a parameter of reward 'length' \(did you mean 'tolerance'\?\)",
        ),
    ],
)
def test_length_parameter_errors(kwargs, message):
    with pytest.raises(RewardError, match=message):
        get_reward("length", **kwargs)
