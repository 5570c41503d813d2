"""The reward adapter (llm_rl.rewards.scoring): completions as token ids, cut after their stop token, scored by
the recipe's reward functions as PPO and evaluation score them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from datasets import Dataset

from llm_rl.models.tiny import build_tokenizer
from llm_rl.rewards import build_reward_functions
from llm_rl.rewards.scoring import RewardAdapter
from llm_rl.schema import RewardEntry


def none_for_odd_answers(prompts, completions, completion_ids=None, answer=None, **kwargs):
    """A reward that only applies to even answers."""
    return [None if int(gold) % 2 else 0.5 for gold in answer]


def test_reward_adapter_matches_the_reward_functions_called_directly() -> None:
    tokenizer = build_tokenizer()
    rows = Dataset.from_dict({"prompt": ["1+2=", "3+3=", "4+4=", "2+5="], "answer": ["3", "6", "8", "7"]})
    entries = [
        RewardEntry(name="accuracy", mode="exact", weight=1.0),
        RewardEntry(name="format", pattern=r"^\d+$", weight=0.25),
        RewardEntry(name="tests.rewards.test_scoring:none_for_odd_answers", weight=2.0),
    ]
    rewards = build_reward_functions(entries)
    completions = ["3", "5", "8 ", "7"]
    # What the rollout hands the reward step: each completion's ids up to and with its stop token.
    ids = [
        tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        for text in completions
    ]
    adapter = RewardAdapter(rewards, rows, tokenizer, none_reward=-1.0)
    order = [2, 0, 3, 1]
    scores, values = adapter(order, [ids[i] for i in order])

    expected_rows = [rows[i] for i in order]
    direct = [
        function(
            prompts=[row["prompt"] for row in expected_rows],
            completions=[completions[i] for i in order],
            answer=[row["answer"] for row in expected_rows],
        )
        for function in rewards.functions
    ]
    for column, function_values in enumerate(direct):
        for sample, value in enumerate(function_values):
            if value is None:
                assert torch.isnan(values[sample, column])
            else:
                assert values[sample, column].item() == pytest.approx(value)
    weighted = [
        sum(w * v for w, v in zip(rewards.weights, sample, strict=True) if v is not None)
        for sample in zip(*direct, strict=True)
    ]
    assert scores.tolist() == pytest.approx(weighted)


def test_reward_model_with_its_own_tokenizer_scores_decoded_responses(reward_model_dir: Path) -> None:
    """A learned reward whose tokenizer is not the policy's re-reads the decoded text with its own."""
    tokenizer = build_tokenizer()
    rows = Dataset.from_dict({"prompt": ["what is 3 + 4 ?", "good"], "answer": ["7", "7"]})
    rewards = build_reward_functions([RewardEntry(name="reward_model", path=str(reward_model_dir))])
    completions = [" 7", " 3 + 4"]
    ids = [
        tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        for text in completions
    ]
    scores, _ = RewardAdapter(rewards, rows, tokenizer)([0, 1], ids)
    direct = rewards.functions[0](
        prompts=list(rows["prompt"]), completions=completions, answer=list(rows["answer"])
    )
    assert scores.tolist() == pytest.approx(direct)
    assert len(set(direct)) == 2, "the two texts should score differently"


def test_reward_adapter_gives_none_reward_when_no_function_applies() -> None:
    tokenizer = build_tokenizer()
    rows = Dataset.from_dict({"prompt": ["1+2=", "2+2="], "answer": ["3", "4"]})
    rewards = build_reward_functions([RewardEntry(name="tests.rewards.test_scoring:none_for_odd_answers")])
    completion = [tokenizer.convert_tokens_to_ids("3"), tokenizer.eos_token_id]
    scores, _ = RewardAdapter(rewards, rows, tokenizer, none_reward=-0.5)([0, 1], [completion] * 2)
    assert scores.tolist() == [-0.5, 0.5]


def nan_for_odd_answers(prompts, completions, completion_ids=None, answer=None, **kwargs):
    """A reward that breaks (NaN) on odd answers."""
    return [float("nan") if int(gold) % 2 else 1.0 for gold in answer]


def test_reward_adapter_counts_skipped_samples() -> None:
    tokenizer = build_tokenizer()
    rows = Dataset.from_dict({"prompt": ["1+2=", "2+2=", "2+3="], "answer": ["3", "4", "5"]})
    rewards = build_reward_functions(
        [
            RewardEntry(name="tests.rewards.test_scoring:nan_for_odd_answers", on_invalid="skip"),
            RewardEntry(name="accuracy"),
        ]
    )
    adapter = RewardAdapter(rewards, rows, tokenizer)
    completion = [tokenizer.convert_tokens_to_ids("4"), tokenizer.eos_token_id]
    scores, values = adapter([0, 1, 2], [completion] * 3)
    assert torch.isnan(values[:, 0]).tolist() == [True, False, True]
    assert scores.tolist() == [0.0, 2.0, 0.0]
    assert adapter.take_skipped() == {"nan_for_odd_answers": 2}
    assert adapter.take_skipped() == {"nan_for_odd_answers": 0}
