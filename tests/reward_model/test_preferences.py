"""Preference pairs for reward-model training (llm_rl.reward_model.preferences): held-out pairs never trained on,
and corrupted GSM8K solutions that are wrong where the references are right."""

from __future__ import annotations

import json
from pathlib import Path

from llm_rl.reward_model.preferences import PreferenceDataSection, corrupt_solution, load_preferences
from llm_rl.rewards import get_reward


def test_held_out_pairs_are_never_trained_on() -> None:
    train, held_out = load_preferences(PreferenceDataSection(), seed=0)
    seen = set(zip(train["prompt"], train["rejected"], strict=True))
    assert not seen & set(zip(held_out["prompt"], held_out["rejected"], strict=True))
    assert set(train["prompt"]) == set(held_out["prompt"])


def test_corrupted_gsm8k_solutions_are_wrong_and_references_right(gsm8k_dir: Path) -> None:
    """Over all of train.jsonl: math-verify scores each chosen 1 and each rejected 0 against the answer."""
    import random

    accuracy = get_reward("accuracy")
    rng = random.Random(0)
    rows = [json.loads(line) for line in (gsm8k_dir / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    rejected = [corrupt_solution(row["answer"], rng) for row in rows]
    answers = [row["answer"] for row in rows]
    prompts = [row["question"] for row in rows]
    assert all(text is not None for text in rejected)
    assert accuracy(prompts=prompts, completions=answers, answer=answers) == [1.0] * len(rows)
    assert accuracy(prompts=prompts, completions=rejected, answer=answers) == [0.0] * len(rows)
