"""Forward passes over response positions only: the policy's log-probs and the critic's values.

Prompt positions never get logits: the policy's LM head runs on the last `width + 1` positions alone
(transformers' `logits_to_keep`), and the critic's head on the hidden states of the response positions.
No-grad passes over a rollout go `chunk_size` sequences at a time and keep only the per-token results,
so no batch x length x vocabulary tensor outlives a chunk.

The training pass (`PolicyAndCritic`) never holds the full logits either: the LM head runs on the
final hidden states `LOGPROB_CHUNK_POSITIONS` positions at a time, each chunk recomputed in the backward
pass (`chunked_token_logprobs`), so what is kept for the backward pass is the hidden states and one
log-prob and entropy per position, and the largest transient is one chunk's logits, whatever the
batch, the length or the vocabulary. (TRL 1.16's GRPO and RLOO trainers do the same by patching the
model's forward with a fused LM head, always on: `trl.trainer.utils.add_fused_lm_head`.)
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedModel
from trl.trainer.utils import selective_log_softmax, selective_log_softmax_and_entropy

# Response positions whose logits are computed at once in the training pass: one chunk's logits
# (positions x vocabulary, fp32) is the largest tensor the LM head makes, 200 MB at a 49,152 vocabulary.
LOGPROB_CHUNK_POSITIONS = 1024
# Config fields by which a model's forward rescales its logits after the LM head (Gemma's softcapping,
# Cohere's logit_scale, Granite's logits_scaling, ...): such models keep the full-logits path.
LOGIT_RESCALING_FIELDS = (
    "final_logit_softcapping",
    "logit_scale",
    "output_multiplier",
    "lm_head_multiplier",
    "logits_scaling",
)


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


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model inside a peft model or a DeepSpeed engine."""
    base = getattr(model, "module", model)
    return base.get_base_model() if hasattr(base, "get_base_model") else base


def head_is_last(policy: torch.nn.Module) -> bool:
    """Whether the policy's logits are its LM head applied to its body's last hidden states, and nothing
    more (no rescaling or softcapping after the head), so that the head may run on chunks of them."""
    model = base_model(policy)
    text_config = model.config.get_text_config()
    has_parts = hasattr(model, "base_model_prefix") and model.get_output_embeddings() is not None
    return has_parts and all(getattr(text_config, name, None) is None for name in LOGIT_RESCALING_FIELDS)


def chunked_token_logprobs(
    hidden: torch.Tensor,
    head: torch.nn.Module,
    tokens: torch.Tensor,
    temperature: float,
    entropy_requires_grad: bool,
    chunk_positions: int = LOGPROB_CHUNK_POSITIONS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """([batch, width] log-probs of `tokens`, [batch, width] entropies) from [batch, width, hidden] hidden
    states through the LM head `head`, `chunk_positions` positions at a time.

    Each chunk's logits (in fp32, as the full forward's are under mixed precision) are made, used and
    dropped; the backward pass recomputes them a chunk at a time (`torch.utils.checkpoint`). The
    results equal `selective_log_softmax_and_entropy` over the full logits.
    """

    def per_chunk(
        chunk_hidden: torch.Tensor, chunk_tokens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logits = head(chunk_hidden).float()
        return selective_log_softmax_and_entropy(
            logits, chunk_tokens, entropy_requires_grad=entropy_requires_grad, temperature=temperature
        )

    flat_hidden, flat_tokens = hidden.reshape(-1, hidden.shape[-1]), tokens.reshape(-1)
    logprobs, entropies = [], []
    for start in range(0, flat_tokens.shape[0], chunk_positions):
        rows = slice(start, start + chunk_positions)
        if torch.is_grad_enabled():
            chunk_logprobs, chunk_entropy = checkpoint(
                per_chunk, flat_hidden[rows], flat_tokens[rows], use_reentrant=False
            )
        else:
            chunk_logprobs, chunk_entropy = per_chunk(flat_hidden[rows], flat_tokens[rows])
        logprobs.append(chunk_logprobs)
        entropies.append(chunk_entropy)
    return torch.cat(logprobs).view(tokens.shape), torch.cat(entropies).view(tokens.shape)


def response_logprobs(
    policy: torch.nn.Module,
    inputs: dict[str, torch.Tensor],
    tokens: torch.Tensor,
    temperature: float,
    entropy_requires_grad: bool,
    chunk_positions: int = LOGPROB_CHUNK_POSITIONS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """([batch, width] log-probs, entropies) of the last `width` tokens (`tokens`, [batch, width]).

    From the body's hidden states through the LM head in chunks (`chunked_token_logprobs`) when the
    head is the model's last step (`head_is_last`); from the full response logits otherwise.
    """
    width = tokens.shape[1]
    if not head_is_last(policy):
        logits = response_logits(policy, inputs, width).float()
        return selective_log_softmax_and_entropy(
            logits, tokens, entropy_requires_grad=entropy_requires_grad, temperature=temperature
        )
    model = base_model(policy)
    body = getattr(model, model.base_model_prefix)
    hidden = body(**inputs, use_cache=False).last_hidden_state[:, -width - 1 : -1]
    return chunked_token_logprobs(
        hidden, model.get_output_embeddings(), tokens, temperature, entropy_requires_grad, chunk_positions
    )


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
    """The two trained models as one module, so that DDP or DeepSpeed wraps (and steps) them together;
    the policy alone for a critic-free estimator (`critic` None)."""

    def __init__(self, policy: torch.nn.Module, critic: PreTrainedModel | None) -> None:
        super().__init__()
        self.policy = policy
        self.critic = critic
        # The policy's config stands for the pair where transformers and DeepSpeed read one (hidden size).
        self.config = policy.config

    @property
    def models(self) -> list[torch.nn.Module]:
        """The trained models: the policy, and the critic when there is one."""
        return [self.policy] if self.critic is None else [self.policy, self.critic]

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
        for model in self.models:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)

    def gradient_checkpointing_disable(self) -> None:
        for model in self.models:
            model.gradient_checkpointing_disable()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        tokens: torch.Tensor,
        temperature: float = 1.0,
        entropy_requires_grad: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(policy log-probs, their entropies, critic values or None) of the last `width` positions, whose
        tokens are `tokens` ([batch, width]); no full-vocabulary logits are kept (`response_logprobs`)."""
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
        logprobs, entropy = response_logprobs(self.policy, inputs, tokens, temperature, entropy_requires_grad)
        if self.critic is None:
            return logprobs, entropy, None
        return logprobs, entropy, critic_values(self.critic, inputs, tokens.shape[1])
