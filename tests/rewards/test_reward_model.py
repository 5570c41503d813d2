"""The `reward_model` reward on a tiny sequence-classification model with a tokenizer of its own: its logits,
batches, chat template, normalization and clipping, and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from llm_rl.errors import RewardError
from llm_rl.rewards import get_reward


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


# A reward model that shares the tiny policy's tokenizer (the TRL parity fixture's), for `read: tokens`.
SHARED_VOCABULARY = Path(__file__).resolve().parents[1] / "fixtures" / "trl_ppo_parity" / "reward_model"


def score_of_ids(ids: list[int]) -> float:
    """The model's logit at the last of `ids`, read unpadded and without searching for the pad id."""
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(SHARED_VOCABULARY).eval()
    model.config.pad_token_id = None  # one sequence: the score is read at its last position
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0, 0].item()


def test_read_tokens_scores_the_policys_ids_as_generated():
    """As TRL's PPOTrainer scored: prompt ids + completion ids, nothing appended, even when the last
    generated token is the pad id."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(SHARED_VOCABULARY)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    digit = tokenizer.convert_tokens_to_ids
    prompts = ["3+4=", "12+9=", "5+5="]
    completion_ids = [[digit("7"), eos], [digit("2"), digit("1")], [digit("1"), pad]]
    completions = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    tokens = get_reward("reward_model", path=str(SHARED_VOCABULARY), read="tokens", batch_size=3)
    scores = tokens(prompts=prompts, completions=completions, completion_ids=completion_ids)
    expected = [
        score_of_ids(tokenizer(prompt).input_ids + ids)
        for prompt, ids in zip(prompts, completion_ids, strict=True)
    ]
    assert scores == pytest.approx(expected, abs=1e-5)
    text = get_reward("reward_model", path=str(SHARED_VOCABULARY))(prompts=prompts, completions=completions)
    assert text[0] == pytest.approx(scores[0], abs=1e-5), (
        "a completion that stopped reads the same either way"
    )
    assert text[1] != pytest.approx(scores[1], abs=1e-3), "text mode appends EOS to a cut completion"


def test_read_tokens_needs_the_policys_vocabulary_and_no_max_length():
    tokens = get_reward("reward_model", path=str(SHARED_VOCABULARY), read="tokens")
    with pytest.raises(
        RewardError, match=r"read: token id 40 is outside the reward model's vocabulary \(17\)"
    ):
        tokens(prompts=["1+1="], completions=["?"], completion_ids=[[5, 40]])
    with pytest.raises(RewardError, match=r"\.max_length: applies to `read: text` only"):
        get_reward("reward_model", path=str(SHARED_VOCABULARY), read="tokens", max_length=8)
