"""Where generated completions end, for every part that generates (PPO's rollouts, held-out evaluation,
`llm-rl sample`).

A completion ends at its first stop token, or at the length limit. Both are read from the token ids
alone, never from padding: with most chat tokenizers the pad token *is* EOS, and a model may emit a
pad token of its own accord.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import GenerationConfig, PreTrainedTokenizerBase


def eos_token_ids(
    tokenizer: PreTrainedTokenizerBase, generation_config: GenerationConfig | None = None
) -> list[int]:
    """Every EOS id: the tokenizer's and those of the model's generation config (chat models often list
    several, such as an end-of-turn and an end-of-text token)."""
    ids = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
    configured = getattr(generation_config, "eos_token_id", None)
    if isinstance(configured, int):
        configured = [configured]
    for token in configured or []:
        if token not in ids:
            ids.append(token)
    return ids


def response_lengths(completion_ids: torch.Tensor, stop_token_ids: Sequence[int]) -> torch.Tensor:
    """Each completion's last position: its first stop token, or the last position if it has none."""
    width = completion_ids.shape[1]
    if not stop_token_ids:
        return torch.full(completion_ids.shape[:1], width - 1, device=completion_ids.device)
    stops = torch.isin(completion_ids, torch.tensor(list(stop_token_ids), device=completion_ids.device))
    positions = torch.arange(width, device=completion_ids.device).expand_as(completion_ids)
    first_stop = torch.where(stops, positions, width).min(dim=1).values
    return first_stop.clamp(max=width - 1)


def ends_with_stop(
    completion_ids: torch.Tensor, lengths: torch.Tensor, stop_token_ids: Sequence[int]
) -> torch.Tensor:
    """Whether each completion ended on a stop token (False: it ran into the length limit)."""
    if not stop_token_ids:
        return torch.zeros_like(lengths, dtype=torch.bool)
    last = completion_ids.gather(1, lengths[:, None]).squeeze(1)
    return torch.isin(last, torch.tensor(list(stop_token_ids), device=completion_ids.device))


def kept_positions(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """[batch, width]: True at each completion's positions up to and with its last token."""
    return torch.arange(width, device=lengths.device)[None, :] <= lengths[:, None]


def cut_after_stop(
    completion_ids: torch.Tensor, stop_token_ids: Sequence[int], pad_token_id: int
) -> torch.Tensor:
    """Everything after each completion's first stop token becomes padding."""
    lengths = response_lengths(completion_ids, stop_token_ids)
    return completion_ids.masked_fill(~kept_positions(lengths, completion_ids.shape[1]), pad_token_id)


def trimmed(completion_ids: torch.Tensor, stop_token_ids: Sequence[int]) -> list[list[int]]:
    """Each completion's token ids up to and with its stop token, as lists (what reward functions get)."""
    lengths = response_lengths(completion_ids, stop_token_ids).tolist()
    return [row[: length + 1] for row, length in zip(completion_ids.tolist(), lengths, strict=True)]
