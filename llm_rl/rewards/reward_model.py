"""`reward_model`: the score a local sequence-classification model gives each prompt + completion.

The model and its own tokenizer load once, when the reward is built. Plain-text samples are scored as
`prompt + completion + EOS`, the text TRL's RewardTrainer trains on (it appends EOS, and the score is
read at the last token); conversational ones as prompt messages + the reply, through the reward
tokenizer's chat template when it has one. Texts go through the model in batches, right-padded, under
`torch.inference_mode`, and the score is `logits[:, 0]`, optionally normalized then clipped.

`read: tokens` scores the policy's own token ids instead of re-tokenized text: the prompt's ids (as the
policy saw them) followed by the completion's, up to and with its stop token, nothing appended. That is
what TRL's PPOTrainer scored, so a TRL PPO run converted by `llm-rl migrate` reads tokens; it needs a
reward model that shares the policy's tokenizer, as TRL's did. The batch is left-padded with explicit
positions and the score read at the last position, so no token id is ever mistaken for padding.

`normalize: {mean, std}` standardizes with fixed statistics (the reward model's own, measured once);
`normalize: running` with the mean and standard deviation of every score this process has seen so
far, this batch included (Welford's update): rewards near 0 with unit spread whatever the model's scale.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, validate_call
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from llm_rl.data.prompts import prompt_token_ids
from llm_rl.rewards.base import (
    RewardFunction,
    RewardParameterError,
    completion_text,
    is_conversational,
    message_text,
)

STRICT = ConfigDict(strict=True)


class Normalization(BaseModel):
    """`normalize: {mean, std}`: scores become (score - mean) / std, e.g. the reward model's own stats."""

    model_config = ConfigDict(extra="forbid", strict=True)

    mean: float
    std: Annotated[float, Field(gt=0)]


def default_device() -> torch.device:
    """This process's GPU when there is one (LOCAL_RANK under accelerate or torchrun), else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def parse_device(device: str | None) -> torch.device:
    """The torch device a recipe names, or the default one."""
    if device is None:
        return default_device()
    try:
        return torch.device(device)
    except RuntimeError as err:
        raise RewardParameterError("device", f"not a torch device {device!r} ({err})") from None


def load_reward_model(path: str, dtype: str, trust_remote_code: bool) -> tuple[Any, Any]:
    """The sequence-classification model and its tokenizer from a local folder, or an error naming it."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise RewardParameterError("path", f"no such folder {path!r} (a reward model is a local folder)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
        model = AutoModelForSequenceClassification.from_pretrained(
            folder, dtype=dtype, trust_remote_code=trust_remote_code
        )
    except Exception as err:  # transformers raises OSError, ValueError, KeyError... for bad folders
        raise RewardParameterError(
            "path", f"cannot load a sequence-classification model from {path!r} ({type(err).__name__}: {err})"
        ) from None
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise RewardParameterError(
                "path", f"the tokenizer in {path!r} has neither a pad nor an EOS token"
            )
        tokenizer.pad_token = tokenizer.eos_token
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


class RunningStats:
    """Mean and variance of every score seen so far (Welford's online update)."""

    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self._squares = 0.0

    def update(self, values: list[float]) -> None:
        for value in values:
            self.count += 1
            delta = value - self.mean
            self.mean += delta / self.count
            self._squares += delta * (value - self.mean)

    @property
    def std(self) -> float:
        """The population standard deviation; 1.0 until there is a spread to measure."""
        variance = self._squares / self.count if self.count else 0.0
        return variance**0.5 if variance > 0 else 1.0


class RewardModelScorer:
    """The reward function: scores batches of samples with the loaded model."""

    __name__ = "reward_model"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        batch_size: int,
        max_length: int | None,
        normalize: Normalization | Literal["running"] | None,
        clip: list[float] | None,
        read: Literal["text", "tokens"] = "text",
    ) -> None:
        self.model = model.eval()
        self.read = read
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length
        self.normalize = RunningStats() if normalize == "running" else normalize
        self.clip = clip

    def text(self, prompt: Any, completion: Any) -> str:
        """One sample as the text the reward model reads."""
        if not is_conversational(prompt):
            text = str(prompt) + completion_text(completion)
            eos = self.tokenizer.eos_token
            return text if eos is None or text.endswith(eos) else text + eos
        reply = (
            completion
            if is_conversational(completion)
            else [{"role": "assistant", "content": completion_text(completion)}]
        )
        messages = list(prompt) + list(reply)
        if self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template(messages, tokenize=False)
        return "\n".join(message_text(m) for m in messages)

    def encode(self, texts: list[str], add_special_tokens: bool) -> Any:
        """A batch of texts as the model reads them: right-padded, so positions match unpadded runs."""
        return self.tokenizer(
            texts,
            return_tensors="pt",
            padding=True,
            padding_side="right",
            truncation=self.max_length is not None,
            max_length=self.max_length,
            add_special_tokens=add_special_tokens,
        ).to(self.model.device)

    @torch.inference_mode()
    def score(self, texts: list[str], add_special_tokens: bool) -> list[float]:
        """The model's logits[:, 0] for a batch of texts."""
        return self.model(**self.encode(texts, add_special_tokens)).logits[:, 0].float().tolist()

    @torch.inference_mode()
    def score_ids(self, sequences: list[list[int]]) -> list[float]:
        """The model's logits[:, 0] at the last token of each id sequence (`read: tokens`)."""
        vocabulary = self.model.get_input_embeddings().num_embeddings
        unknown = max(max(ids) for ids in sequences)
        if unknown >= vocabulary:
            raise RewardParameterError(
                "read",
                f"token id {unknown} is outside the reward model's vocabulary ({vocabulary}): `read: tokens` "
                "needs a reward model that shares the policy's tokenizer",
            )
        width = max(map(len, sequences))
        ids = torch.zeros(len(sequences), width, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, sequence in enumerate(sequences):
            ids[row, width - len(sequence) :] = torch.tensor(sequence)
            mask[row, width - len(sequence) :] = 1
        device = self.model.device
        ids, mask = ids.to(device), mask.to(device)
        # Embeddings rather than ids: the model then reads its score at the last position (left padding puts
        # every sequence's last token there) instead of searching for the pad id, which a policy may generate.
        with quiet_padding_warning():
            logits = self.model(
                inputs_embeds=self.model.get_input_embeddings()(ids),
                attention_mask=mask,
                position_ids=(mask.cumsum(1) - 1).clamp(min=0),
            ).logits
        return logits[:, 0].float().tolist()

    def adjust(self, score: float) -> float:
        """Normalize, then clip, one raw score as the recipe asks."""
        if self.normalize is not None:
            score = (score - self.normalize.mean) / self.normalize.std
        if self.clip is not None:
            score = min(max(score, self.clip[0]), self.clip[1])
        return score

    def __call__(self, prompts: list[Any], completions: list[Any], completion_ids: Any = None, **kwargs: Any):
        if self.read == "tokens":
            return self.score_tokens(prompts, completion_ids)
        texts = [self.text(p, c) for p, c in zip(prompts, completions, strict=True)]
        # A chat template writes its own special tokens; plain text gets the tokenizer's (e.g. BOS).
        templated = bool(prompts) and is_conversational(prompts[0]) and bool(self.tokenizer.chat_template)
        scores: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            scores.extend(self.score(texts[start : start + self.batch_size], not templated))
        return self.finish(scores)

    def score_tokens(self, prompts: list[Any], completion_ids: Any) -> list[float]:
        """`read: tokens`: each prompt's token ids followed by its completion's, in batches."""
        if completion_ids is None:
            raise RewardParameterError("read", "`read: tokens` needs the completions' token ids")
        sequences = [
            prompt_token_ids(prompt, self.tokenizer) + [int(i) for i in ids]
            for prompt, ids in zip(prompts, completion_ids, strict=True)
        ]
        scores: list[float] = []
        for start in range(0, len(sequences), self.batch_size):
            scores.extend(self.score_ids(sequences[start : start + self.batch_size]))
        return self.finish(scores)

    def finish(self, scores: list[float]) -> list[float]:
        """Running statistics updated, then each score normalized and clipped."""
        if isinstance(self.normalize, RunningStats):
            self.normalize.update(scores)
        return [self.adjust(s) for s in scores]


@contextmanager
def quiet_padding_warning() -> Iterator[None]:
    """Hide the warning that a model fed embeddings cannot find padding: `score_ids` reads the last position."""
    logger = logging.getLogger("transformers.modeling_layers")
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(previous)


@validate_call(config=STRICT)
def reward_model_reward(
    path: str,
    batch_size: Annotated[int, Field(gt=0)] = 32,
    device: str | None = None,
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto",
    max_length: Annotated[int, Field(gt=0)] | None = None,
    normalize: Normalization | Literal["running"] | None = None,
    clip: Annotated[list[float], Field(min_length=2, max_length=2)] | None = None,
    trust_remote_code: bool = False,
    read: Literal["text", "tokens"] = "text",
) -> RewardFunction:
    """Scores from the sequence-classification model in the local folder `path` (module docstring).

    `device` defaults to this process's GPU, else the CPU; `max_length` truncates long texts (tokens);
    `clip: [lo, hi]` applies after `normalize`. `trust_remote_code` runs the folder's own code. `read:
    tokens` scores the policy's token ids, as TRL's PPOTrainer did (module docstring).
    """
    if read == "tokens" and max_length is not None:
        raise RewardParameterError(
            "max_length", "applies to `read: text` only (`read: tokens` never truncates)"
        )
    if clip is not None and clip[0] > clip[1]:
        raise RewardParameterError("clip", f"expected [lo, hi] with lo <= hi, got {clip}")
    torch_device = parse_device(device)
    model, tokenizer = load_reward_model(path, dtype, trust_remote_code)
    return RewardModelScorer(model.to(torch_device), tokenizer, batch_size, max_length, normalize, clip, read)
