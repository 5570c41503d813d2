"""Reward functions on real inputs: GSM8K answers, formats, lengths, a tiny reward model, user functions."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from llm_rl.errors import RewardError
from llm_rl.rewards import CheckedReward, build_reward_functions, completion_text, get_reward
from llm_rl.schema import RewardEntry

GSM8K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k"


def call(reward, completions: list, **columns) -> list[float | None]:
    """Call a reward the way TRL's GRPOTrainer does, with its extra keyword arguments."""
    return reward(
        prompts=["Q:"] * len(completions),
        completions=completions,
        completion_ids=None,
        trainer_state=None,
        log_extra=lambda column, values: None,
        log_metric=lambda name, value: None,
        **columns,
    )


@pytest.fixture(scope="module")
def gsm8k_rows() -> list[dict]:
    path = GSM8K / "test.jsonl"
    if not path.exists():
        pytest.skip(f"GSM8K data not found at {path}")
    return [json.loads(line) for line in path.read_text().splitlines()]


def final_number(solution: str) -> str:
    return solution.rsplit("####", 1)[1].strip()


# ----------------------------------------------------------------------------------------------------
# completion_text
# ----------------------------------------------------------------------------------------------------


def test_completion_text_takes_strings_and_the_last_assistant_message():
    assert completion_text("18") == "18"
    messages = [
        {"role": "assistant", "content": "first"},
        {"role": "user", "content": "more?"},
        {"role": "assistant", "content": "last"},
    ]
    assert completion_text(messages) == "last"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "parts"}]}]) == "parts"
    assert completion_text([]) == ""
    with pytest.raises(RewardError, match="a completion must be a string or a list of messages, got int"):
        completion_text(18)


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


# ----------------------------------------------------------------------------------------------------
# reward_model
# ----------------------------------------------------------------------------------------------------


def own_scores(folder: Path, texts: list[str]) -> list[float]:
    """The saved model's own logits[:, 0], one text at a time."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with torch.inference_mode():
        return [model(**tokenizer(text, return_tensors="pt")).logits[0, 0].item() for text in texts]


PROMPTS = ["what is 3 + 4 ?", "what is 3 + 4 ?", "the answer is", "good"]
COMPLETIONS = [" 7", " the answer is 7 because 3 plus 4 is 7", " 7", " bad bad bad"]


def test_reward_model_scores_are_the_models_logits(reward_model_dir):
    reward = get_reward("reward_model", path=str(reward_model_dir), device="cpu", batch_size=1)
    scores = reward(prompts=PROMPTS, completions=COMPLETIONS)
    # The text TRL's RewardTrainer trains on: prompt + completion + EOS.
    texts = [p + c + "[EOS]" for p, c in zip(PROMPTS, COMPLETIONS, strict=True)]
    expected = own_scores(reward_model_dir, texts)
    assert scores == pytest.approx(expected, abs=1e-6)
    assert len(set(scores)) > 1
    without_eos = own_scores(reward_model_dir, [p + c for p, c in zip(PROMPTS, COMPLETIONS, strict=True)])
    assert scores != pytest.approx(without_eos, abs=1e-6), "EOS must change what the model reads"


def test_reward_model_batches_give_the_same_scores(reward_model_dir):
    one = get_reward("reward_model", path=str(reward_model_dir), batch_size=1)
    batched = get_reward("reward_model", path=str(reward_model_dir), batch_size=3)
    assert batched(prompts=PROMPTS, completions=COMPLETIONS) == pytest.approx(
        one(prompts=PROMPTS, completions=COMPLETIONS), abs=1e-5
    )


def test_reward_model_applies_the_chat_template_to_conversations(reward_model_dir):
    reward = get_reward("reward_model", path=str(reward_model_dir))
    prompts = [[{"role": "user", "content": "what is 3 + 4 ?"}]] * 2
    completions = [[{"role": "assistant", "content": "7"}], [{"role": "assistant", "content": "bad"}]]
    expected = own_scores(
        reward_model_dir, ["user : what is 3 + 4 ? assistant : 7 ", "user : what is 3 + 4 ? assistant : bad "]
    )
    assert reward(prompts=prompts, completions=completions) == pytest.approx(expected, abs=1e-5)


def test_reward_model_running_normalization_uses_every_score_so_far(reward_model_dir):
    raw = get_reward("reward_model", path=str(reward_model_dir))(prompts=PROMPTS, completions=COMPLETIONS)
    running = get_reward("reward_model", path=str(reward_model_dir), normalize="running")
    first = running(prompts=PROMPTS[:2], completions=COMPLETIONS[:2])
    second = running(prompts=PROMPTS[2:], completions=COMPLETIONS[2:])
    seen_first, seen_all = torch.tensor(raw[:2]), torch.tensor(raw)
    mean, std = seen_first.mean(), seen_first.std(unbiased=False)
    assert first == pytest.approx(((seen_first - mean) / std).tolist(), abs=1e-4)
    mean, std = seen_all.mean(), seen_all.std(unbiased=False)
    assert second == pytest.approx(((seen_all[2:] - mean) / std).tolist(), abs=1e-4)


def test_reward_model_normalize_and_clip(reward_model_dir):
    raw = get_reward("reward_model", path=str(reward_model_dir))(prompts=PROMPTS, completions=COMPLETIONS)
    mean, std = 0.5, 0.25
    normalized = get_reward("reward_model", path=str(reward_model_dir), normalize={"mean": mean, "std": std})
    assert normalized(prompts=PROMPTS, completions=COMPLETIONS) == pytest.approx(
        [(s - mean) / std for s in raw], abs=1e-4
    )
    middle = sorted(raw)[1]
    clipped = get_reward("reward_model", path=str(reward_model_dir), clip=[middle, middle + 1e-3])
    values = clipped(prompts=PROMPTS, completions=COMPLETIONS)
    assert all(middle <= v <= middle + 1e-3 for v in values)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"normalize": {"mean": 0.0, "std": 0.0}}, r"\.normalize\.std: input should be greater than 0"),
        ({"clip": [1.0, 0.0]}, r"\.clip: expected \[lo, hi\] with lo <= hi"),
        ({"batch_size": 0}, r"\.batch_size: input should be greater than 0"),
        ({"device": "gpu9"}, r"\.device: not a torch device 'gpu9'"),
    ],
)
def test_reward_model_parameter_errors(reward_model_dir, kwargs, message):
    with pytest.raises(RewardError, match=message):
        get_reward("reward_model", path=str(reward_model_dir), **kwargs)


def test_reward_model_path_missing_or_absent():
    with pytest.raises(RewardError, match=r"get_reward\('reward_model'\)\.path: missing required argument$"):
        get_reward("reward_model")
    with pytest.raises(RewardError, match=r"\.path: no such folder '/no/such/folder'"):
        get_reward("reward_model", path="/no/such/folder")


def test_reward_model_folder_that_is_not_a_model(tmp_path):
    with pytest.raises(RewardError, match=r"\.path: cannot load a sequence-classification model from"):
        get_reward("reward_model", path=str(tmp_path))


# ----------------------------------------------------------------------------------------------------
# user functions by import path
# ----------------------------------------------------------------------------------------------------

USER_MODULE = """
def contains(prompts, completions, word="yes", bonus=0.0, **kwargs):
    return [float(word in c) + bonus for c in completions]

def positional_only(prompts, completions):
    return [0.0 for _ in completions]

NOT_A_FUNCTION = 3
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch) -> str:
    (tmp_path / "my_test_rewards.py").write_text(USER_MODULE)
    (tmp_path / "broken_test_rewards.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_test_rewards"


def test_user_function_by_import_path_with_kwargs(user_module):
    plain = get_reward(f"{user_module}:contains")
    assert plain.__name__ == "contains"
    assert call(plain, ["yes sir", "no"]) == [1.0, 0.0]
    bound = get_reward(f"{user_module}:contains", word="no", bonus=0.5)
    assert call(bound, ["yes sir", "no"]) == [0.5, 1.5]


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        (
            "my_pkg.rewards:fn",
            {},
            r"\.name: cannot import module 'my_pkg\.rewards' \(No module named 'my_pkg'",
        ),
        (
            "broken_test_rewards:fn",
            {},
            r"\.name: cannot import module 'broken_test_rewards' \(RuntimeError: boom\)",
        ),
        ("my_test_rewards:missing", {}, r"\.name: module 'my_test_rewards' has no attribute 'missing'"),
        (
            "my_test_rewards:NOT_A_FUNCTION",
            {},
            r"\.name: my_test_rewards:NOT_A_FUNCTION is a int, not a function",
        ),
        (
            "my_test_rewards:positional_only",
            {},
            r"\.name: my_test_rewards:positional_only must accept \*\*kwargs",
        ),
        (
            "my_test_rewards:contains",
            {"wrod": "x"},
            r"\.wrod: not a parameter of my_test_rewards:contains \(did you mean 'word'\?\)",
        ),
        ("my_test_rewards:contains", {"completions": []}, r"\.completions: not a parameter"),
        ("my_test_rewards:", {}, r"\.name: 'my_test_rewards:': expected an import path"),
    ],
)
def test_user_function_errors(user_module, name, kwargs, message):
    with pytest.raises(RewardError, match=message):
        get_reward(name, **kwargs)


# ----------------------------------------------------------------------------------------------------
# output checks and on_invalid
# ----------------------------------------------------------------------------------------------------


def constant(values):
    """A reward function that returns fixed values, whatever it is given."""

    def reward(prompts, completions, completion_ids=None, **kwargs):
        return values

    return reward


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([1.0], r"reward 'bad' returned 1 values for 3 completions"),
        ("1.0", r"reward 'bad' returned a str, expected a list"),
        ([1.0, "2", 3.0], r"reward 'bad' returned '2' for sample 1"),
        ([1.0, 2.0, True], r"reward 'bad' returned True for sample 2"),
        ([1.0, math.nan, 3.0], r"reward 'bad' returned nan for sample 1"),
        ([1.0, 2.0, -math.inf], r"reward 'bad' returned -inf for sample 2"),
    ],
)
def test_invalid_outputs_name_the_function_and_sample(values, message):
    checked = CheckedReward(constant(values), "bad")
    with pytest.raises(RewardError, match=message):
        call(checked, ["a", "b", "c"])


def test_none_numpy_and_tensor_values_pass():
    import numpy as np

    assert call(CheckedReward(constant([None, 1, np.float32(0.5)]), "ok"), ["a", "b", "c"]) == [
        None,
        1.0,
        0.5,
    ]
    assert call(CheckedReward(constant(torch.tensor([1.0, 2.0, 3.0])), "ok"), ["a", "b", "c"]) == [
        1.0,
        2.0,
        3.0,
    ]


def test_skip_turns_invalid_values_into_none_and_counts_them():
    checked = CheckedReward(constant([1.0, math.nan, "x", None, math.inf]), "shaky", on_invalid="skip")
    logged = []
    values = checked(prompts=["p"] * 5, completions=["c"] * 5, log_metric=lambda n, v: logged.append((n, v)))
    assert values == [1.0, None, None, None, None]
    assert (checked.last_skipped, checked.skipped) == (3, 3)
    assert logged == [("rewards/shaky/skipped", 3.0)]
    call(checked, ["c"] * 5)
    assert (checked.last_skipped, checked.skipped) == (3, 6)
    with pytest.raises(RewardError, match="returned 1 values for 2 completions"):
        CheckedReward(constant([1.0]), "short", on_invalid="skip")(prompts=["p"] * 2, completions=["c"] * 2)


# ----------------------------------------------------------------------------------------------------
# recipe entries and get_reward
# ----------------------------------------------------------------------------------------------------


def test_build_reward_functions_from_recipe_entries(user_module):
    entries = [
        RewardEntry(name="accuracy", weight=2.0, mode="exact"),
        RewardEntry(name="format", pattern=r"\d+", alias="digits", on_invalid="skip"),
        RewardEntry(name=f"{user_module}:contains", word="7"),
    ]
    rewards = build_reward_functions(entries)
    assert rewards.names == ["accuracy", "digits", "contains"]
    assert rewards.weights == [2.0, 1.0, 1.0]
    assert [f.__name__ for f in rewards.functions] == rewards.names
    assert rewards.functions[1].on_invalid == "skip"
    assert [call(f, ["7"], answer=["7"]) for f in rewards.functions] == [[1.0], [1.0], [1.0]]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"name": "acuracy"},
            r"rewards\[1\]\.name: unknown reward 'acuracy' \(did you mean 'accuracy'\?\); registered: accuracy, format, length, reward_model",
        ),
        (
            {"name": "accuracy", "mdoe": "exact"},
            r"rewards\[1\]\.mdoe: not a parameter of reward 'accuracy' \(did you mean 'mode'\?\); it accepts: mode, answer_column",
        ),
        (
            {"name": "accuracy", "mode": "fuzzy"},
            r"rewards\[1\]\.mode: input should be 'auto', 'math' or 'exact'",
        ),
        ({"name": "length", "target": 1.5}, r"rewards\[1\]\.target: input should be a valid integer"),
        (
            {"name": "my_pkg.rewards:fn"},
            r"rewards\[1\]\.name: cannot import module 'my_pkg\.rewards' \(No module named 'my_pkg'",
        ),
    ],
)
def test_build_reward_functions_errors_name_the_dotted_key(entry, message):
    with pytest.raises(RewardError, match=message):
        build_reward_functions([RewardEntry(name="format"), RewardEntry(**entry)])


def test_get_reward_returns_a_checked_grpo_function():
    reward = get_reward("accuracy", mode="exact", alias="exact_match")
    assert isinstance(reward, CheckedReward)
    assert reward.__name__ == "exact_match"
    assert call(reward, ["7", "8"], answer=["7", "7"], question=["3+4=", "3+4="]) == [1.0, 0.0]
    assert get_reward("format").__name__ == "format"
    with pytest.raises(
        RewardError, match=r"get_reward\('accuracy'\)\.on_invalid: input should be 'error' or 'skip'"
    ):
        get_reward("accuracy", on_invalid="ignore")
