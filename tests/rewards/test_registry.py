"""Rewards by name (llm_rl.rewards.registry): user functions by import path, recipe entries, get_reward, and
errors that name the key."""

from __future__ import annotations

import pytest

from llm_rl.errors import RewardError
from llm_rl.rewards import CheckedReward, build_reward_functions, get_reward
from llm_rl.schema import RewardEntry
from tests.rewards.conftest import call

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
