"""PPO's training forward without full-vocabulary logits: the same log-probs, entropies and gradients as
the full-logits path, and nothing batch x length x vocabulary kept for the backward pass."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    LlamaConfig,
    LlamaForCausalLM,
)
from trl.trainer.utils import selective_log_softmax_and_entropy

from llm_rl.algorithms.ppo.forward import (
    PolicyAndCritic,
    chunked_token_logprobs,
    head_is_last,
    model_inputs,
    response_logits,
)
from llm_rl.models.tiny import tiny_model_path

# SmolLM2's vocabulary: what a real chat model's LM head costs.
LARGE_VOCABULARY = 49_152


@pytest.fixture(scope="module")
def policy() -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(tiny_model_path())


def sequences(vocabulary: int, batch: int, length: int, padded: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids and an attention mask with the first rows left-padded by `padded` positions."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, vocabulary, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.bool)
    mask[: batch // 2, :padded] = False
    return ids, mask


def full_logits_path(policy, ids, mask, width, temperature):
    """The path this replaces: the response logits in full, then log-softmax and entropy over them."""
    logits = response_logits(policy, model_inputs(ids, mask, 0), width).float()
    return selective_log_softmax_and_entropy(logits, ids[:, -width:], temperature=temperature)


def gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("chunk_positions", [1, 7, 1024])
def test_chunked_head_equals_the_full_logits_in_values_and_gradients(policy, chunk_positions: int) -> None:
    ids, mask = sequences(policy.config.vocab_size, batch=4, length=12)
    width, temperature = 6, 0.7
    policy.zero_grad()
    expected_logprobs, expected_entropy = full_logits_path(policy, ids, mask, width, temperature)
    (expected_logprobs.sum() + expected_entropy.sum()).backward()
    expected_grads = gradients(policy)

    policy.zero_grad()
    model = policy.model
    hidden = model(**model_inputs(ids, mask, 0)).last_hidden_state[:, -width - 1 : -1]
    logprobs, entropy = chunked_token_logprobs(
        hidden,
        policy.lm_head,
        ids[:, -width:],
        temperature,
        entropy_requires_grad=True,
        chunk_positions=chunk_positions,
    )
    (logprobs.sum() + entropy.sum()).backward()
    assert torch.allclose(logprobs, expected_logprobs, atol=1e-5)
    assert torch.allclose(entropy, expected_entropy, atol=1e-5)
    grads = gradients(policy)
    assert grads.keys() == expected_grads.keys()
    for name, grad in grads.items():
        assert torch.allclose(grad, expected_grads[name], atol=1e-5, rtol=1e-4), name


def test_the_training_forward_gives_the_full_paths_log_probs_and_values(policy) -> None:
    critic = AutoModelForSequenceClassification.from_pretrained(tiny_model_path(), num_labels=1)
    wrapper = PolicyAndCritic(policy, critic)
    ids, mask = sequences(policy.config.vocab_size, batch=4, length=12)
    width = 5
    logprobs, entropy, values = wrapper(**model_inputs(ids, mask, 0), tokens=ids[:, -width:], temperature=1.0)
    expected_logprobs, expected_entropy = full_logits_path(policy, ids, mask, width, 1.0)
    assert torch.allclose(logprobs, expected_logprobs, atol=1e-5)
    assert torch.allclose(entropy, expected_entropy, atol=1e-5)
    assert not entropy.requires_grad, "the entropy carries no gradient unless asked (ppo.entropy_coef 0)"
    assert values.shape == (4, width)


def test_a_model_that_rescales_its_logits_keeps_the_full_logits_path(policy) -> None:
    assert head_is_last(policy)
    rescaled = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                            num_attention_heads=2, num_key_value_heads=2))  # fmt: skip
    rescaled.config.final_logit_softcapping = 30.0
    assert not head_is_last(rescaled)


def largest_saved_for_backward(run) -> int:
    """Elements of the largest tensor `run()` keeps for its backward pass, parameters left out (they are
    held anyway)."""
    largest = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal largest
        if not isinstance(tensor, torch.nn.Parameter):
            largest = max(largest, tensor.numel())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        run().backward()
    return largest


def kept_by_training_forward(vocabulary: int, batch: int, width: int) -> int:
    """The largest tensor the training forward of a tiny Llama with `vocabulary` tokens keeps for backward."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocabulary, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256)  # fmt: skip
    critic = LlamaForCausalLM(config)  # any model with a body: only its hidden states are read
    critic.score = torch.nn.Linear(32, 1)
    wrapper = PolicyAndCritic(LlamaForCausalLM(config), critic)
    ids, mask = sequences(vocabulary, batch=batch, length=width + 8)

    def loss() -> torch.Tensor:
        logprobs, entropy, values = wrapper(
            **model_inputs(ids, mask, 0), tokens=ids[:, -width:], entropy_requires_grad=True
        )
        return logprobs.sum() + entropy.sum() + values.sum()

    return largest_saved_for_backward(loss)


@pytest.mark.parametrize(("batch", "width"), [(2, 32), (8, 64)])
def test_nothing_batch_by_length_by_vocabulary_is_kept_for_backward(batch: int, width: int) -> None:
    """A tiny Llama with SmolLM2's 49,152-token vocabulary: the full-logits path keeps batch x width x
    vocabulary elements for the backward pass; the training forward keeps the same as with a vocabulary
    of 64 tokens, so nothing it keeps grows with the vocabulary."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=LARGE_VOCABULARY, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256)  # fmt: skip
    policy = LlamaForCausalLM(config)
    ids, mask = sequences(LARGE_VOCABULARY, batch=batch, length=width + 8)
    full = largest_saved_for_backward(lambda: full_logits_path(policy, ids, mask, width, 1.0)[0].sum())
    assert full >= batch * width * LARGE_VOCABULARY
    kept = kept_by_training_forward(LARGE_VOCABULARY, batch, width)
    assert kept == kept_by_training_forward(64, batch, width)
    assert kept < width * LARGE_VOCABULARY / 8, kept
