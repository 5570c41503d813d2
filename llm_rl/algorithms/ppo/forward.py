"""Forward passes over response positions only: the policy's logits and the critic's values.

Prompt positions never get logits: the policy's LM head runs on the last `width + 1` positions alone
(transformers' `logits_to_keep`), and the critic's head on the hidden states of the response positions.
No-grad passes over a rollout go `chunk_size` sequences at a time and keep only the per-token results,
so no batch x length x vocabulary tensor outlives a chunk.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import torch
from transformers import PreTrainedModel
from trl.trainer.utils import selective_log_softmax


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted over attended tokens only (left padding does not shift a prompt)."""
    mask = attention_mask.long()
    return mask.cumsum(1) - mask


def model_inputs(
    ids: torch.Tensor, attention_mask: torch.Tensor, pad_token_id: int
) -> dict[str, torch.Tensor]:
    """Inputs of a forward over prompt + response: unattended positions hold the pad token."""
    return {
        "input_ids": ids.masked_fill(~attention_mask, pad_token_id),
        "attention_mask": attention_mask.long(),
        "position_ids": position_ids(attention_mask),
    }


def accepts_logits_to_keep(model: torch.nn.Module) -> bool:
    """Whether a causal LM's forward can compute logits for the last positions only (a peft model and a
    DeepSpeed engine pass the argument on to the model they hold)."""
    base = getattr(model, "module", model)  # a DeepSpeed engine (the reference under ZeRO) holds its model
    base = base.get_base_model() if hasattr(base, "get_base_model") else base
    return logits_to_keep_in(type(base))


@functools.cache
def logits_to_keep_in(model_class: type) -> bool:
    return "logits_to_keep" in inspect.signature(model_class.forward).parameters


def response_logits(policy: torch.nn.Module, inputs: dict[str, torch.Tensor], width: int) -> torch.Tensor:
    """[batch, width, vocabulary]: the logits that predict each of the last `width` tokens."""
    if accepts_logits_to_keep(policy):
        logits = policy(**inputs, logits_to_keep=width + 1, use_cache=False).logits
    else:
        logits = policy(**inputs, use_cache=False).logits[:, -width - 1 :]
    return logits[:, :-1]


def critic_values(critic: PreTrainedModel, inputs: dict[str, torch.Tensor], width: int) -> torch.Tensor:
    """[batch, width]: the critic's value of the state before each of the last `width` tokens."""
    body = getattr(critic, critic.base_model_prefix)
    hidden = body(**inputs, use_cache=False).last_hidden_state
    return critic.score(hidden[:, -width - 1 : -1]).squeeze(-1)


@torch.no_grad()
def in_chunks(
    per_chunk: Callable[[dict[str, torch.Tensor], torch.Tensor], torch.Tensor],
    ids: torch.Tensor,
    attention_mask: torch.Tensor,
    pad_token_id: int,
    chunk_size: int,
) -> torch.Tensor:
    """`per_chunk(model inputs, token ids)` over `chunk_size` sequences at a time, the results joined."""
    parts = []
    for start in range(0, ids.shape[0], chunk_size):
        rows = slice(start, start + chunk_size)
        parts.append(per_chunk(model_inputs(ids[rows], attention_mask[rows], pad_token_id), ids[rows]))
    return torch.cat(parts)


def chunked_logprobs(
    policy: torch.nn.Module,
    ids: torch.Tensor,
    attention_mask: torch.Tensor,
    width: int,
    temperature: float,
    pad_token_id: int,
    chunk_size: int,
) -> torch.Tensor:
    """[batch, width] log-probabilities of the response tokens (the last `width`), a chunk at a time."""

    def logprobs(inputs: dict[str, torch.Tensor], chunk_ids: torch.Tensor) -> torch.Tensor:
        # In fp32, as the training forward's logits are (accelerate returns them so under mixed precision).
        logits = response_logits(policy, inputs, width).float()
        return selective_log_softmax(logits, chunk_ids[:, -width:], temperature=temperature)

    return in_chunks(logprobs, ids, attention_mask, pad_token_id, chunk_size)


def chunked_values(
    critic: PreTrainedModel,
    ids: torch.Tensor,
    attention_mask: torch.Tensor,
    width: int,
    pad_token_id: int,
    chunk_size: int,
) -> torch.Tensor:
    """[batch, width] values of the response positions, a chunk at a time."""
    return in_chunks(
        lambda inputs, _: critic_values(critic, inputs, width), ids, attention_mask, pad_token_id, chunk_size
    )


class PolicyAndCritic(torch.nn.Module):
    """The two trained models as one module, so that DDP or DeepSpeed wraps (and steps) them together."""

    def __init__(self, policy: torch.nn.Module, critic: PreTrainedModel) -> None:
        super().__init__()
        self.policy = policy
        self.critic = critic
        # The policy's config stands for the pair where transformers and DeepSpeed read one (hidden size).
        self.config = policy.config

    @property
    def is_gradient_checkpointing(self) -> bool:
        """Whether activations are recomputed (transformers 5 names it `is_activation_checkpointing`)."""
        policy = self.policy.get_base_model() if hasattr(self.policy, "get_base_model") else self.policy
        for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
            if hasattr(type(policy), name):
                return bool(getattr(policy, name))
        return False

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict | None = None) -> None:
        """Recompute activations in the backward pass, in both models."""
        kwargs = gradient_checkpointing_kwargs or {"use_reentrant": False}
        for model in (self.policy, self.critic):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)

    def gradient_checkpointing_disable(self) -> None:
        for model in (self.policy, self.critic):
            model.gradient_checkpointing_disable()

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, width: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(policy logits, critic values) of the last `width` positions."""
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
        return response_logits(self.policy, inputs, width), critic_values(self.critic, inputs, width)
