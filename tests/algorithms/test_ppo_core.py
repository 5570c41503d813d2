"""PPO's maths (llm_rl.algorithms.ppo.core, llm_rl.models.completions, llm_rl.algorithms.ppo.rollout) on small cases worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from llm_rl.algorithms.ppo import core
from llm_rl.algorithms.ppo.rollout import (
    AdvantageSettings,
    Rollout,
    estimate_advantages,
    join_sequences,
    penalise_missing_stop,
)
from llm_rl.models.completions import cut_after_stop, ends_with_stop, eos_token_ids, response_lengths, trimmed
from llm_rl.models.tiny import build_tokenizer

EOS, PAD = 2, 0


def tensor(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


# --------------------------------------------------------------------------------------------------
# Masked statistics
# --------------------------------------------------------------------------------------------------


def test_masked_mean_counts_only_the_masked_positions() -> None:
    values = tensor([[1, 2, 3], [4, 5, 6]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert core.masked_mean(values, mask).item() == pytest.approx(7 / 3)
    assert core.masked_mean(values, mask, dim=1).tolist() == pytest.approx([1.5, 4.0])


def test_masked_variance_and_whitening() -> None:
    values = tensor([[1, 2, 4, 100]])
    mask = torch.tensor([[True, True, True, False]])
    # mean 7/3; squared deviations 16/9 + 1/9 + 25/9 = 42/9; biased 14/9, unbiased x 3/2 = 7/3.
    assert core.masked_var(values, mask, unbiased=False).item() == pytest.approx(14 / 9)
    assert core.masked_var(values, mask).item() == pytest.approx(7 / 3)
    whitened = core.masked_whiten(values, mask)
    expected = [(x - 7 / 3) / math.sqrt(7 / 3) for x in (1, 2, 4)]
    assert whitened[0, :3].tolist() == pytest.approx(expected, rel=1e-5)
    kept_mean = core.masked_whiten(values, mask, shift_mean=False)
    assert kept_mean[0, :3].tolist() == pytest.approx([x + 7 / 3 for x in expected], rel=1e-5)
    with pytest.raises(ValueError, match="at least 2"):
        core.masked_var(values, torch.tensor([[True, False, False, False]]))


# --------------------------------------------------------------------------------------------------
# Where responses end
# --------------------------------------------------------------------------------------------------


def test_response_length_is_the_first_stop_token_never_padding() -> None:
    completions = torch.tensor(
        [
            [5, EOS, PAD, PAD],  # stops at 1
            [5, 6, 7, 8],  # length limit: last position
            [EOS, PAD, PAD, PAD],  # stops at once
            [5, PAD, EOS, PAD],  # a pad token the model emitted is an ordinary token
        ]
    )
    assert response_lengths(completions, [EOS]).tolist() == [1, 3, 0, 2]
    # A pad token equal to EOS (most chat models): padding after the stop changes nothing.
    assert response_lengths(torch.tensor([[5, EOS, EOS, EOS]]), [EOS]).tolist() == [1]
    # Several stop ids (end of turn and end of text): the first of any.
    assert response_lengths(torch.tensor([[5, 9, EOS]]), [EOS, 9]).tolist() == [1]
    # No stop token: every response runs to the length limit.
    assert response_lengths(completions, []).tolist() == [3, 3, 3, 3]
    assert ends_with_stop(completions, response_lengths(completions, [EOS]), [EOS]).tolist() == [
        True,
        False,
        True,
        True,
    ]


def test_completions_are_cut_after_their_stop_token() -> None:
    completions = torch.tensor([[5, EOS, 7, 8], [5, 6, 7, 8]])
    assert cut_after_stop(completions, [EOS], PAD).tolist() == [[5, EOS, PAD, PAD], [5, 6, 7, 8]]
    assert trimmed(completions, [EOS]) == [[5, EOS], [5, 6, 7, 8]]


def test_eos_ids_join_the_tokenizer_and_the_generation_config() -> None:
    from transformers import GenerationConfig

    tokenizer = build_tokenizer()
    assert eos_token_ids(tokenizer) == [tokenizer.eos_token_id]
    config = GenerationConfig(eos_token_id=[tokenizer.eos_token_id, 11])
    assert eos_token_ids(tokenizer, config) == [tokenizer.eos_token_id, 11]


def test_policy_and_value_masks_cover_the_response_and_one_more() -> None:
    policy, value = core.response_masks(torch.tensor([1, 3]), 4)
    assert policy.int().tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert value.int().tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]


# --------------------------------------------------------------------------------------------------
# KL penalty and per-token rewards
# --------------------------------------------------------------------------------------------------


def test_kl_estimators() -> None:
    logprobs, ref_logprobs = torch.log(tensor([0.5])), torch.log(tensor([0.25]))
    # k1 = log p - log q = log 2; k3 = (q/p - 1) - log(q/p) = -0.5 + log 2.
    assert core.kl_estimate(logprobs, ref_logprobs, "k1").item() == pytest.approx(math.log(2))
    assert core.kl_estimate(logprobs, ref_logprobs, "k3").item() == pytest.approx(math.log(2) - 0.5)
    # k3 is never negative; k1 is where the reference is likelier.
    assert (
        core.kl_estimate(ref_logprobs, logprobs, "k1").item()
        < 0
        < core.kl_estimate(ref_logprobs, logprobs, "k3")
    )
    with pytest.raises(ValueError, match="k2"):
        core.kl_estimate(logprobs, ref_logprobs, "k2")


def test_scores_land_after_the_last_token_or_on_the_last_position() -> None:
    kl = tensor([[0.1, 0.2, 0.3], [0.1, 0.1, 0.1]])
    rewards, penalty = core.token_rewards(tensor([1.0, 2.0]), kl, torch.tensor([0, 2]), kl_coef=0.5)
    assert torch.allclose(penalty, tensor([[-0.05, -0.1, -0.15], [-0.05, -0.05, -0.05]]))
    # Row 0 ends at 0: its score at 1. Row 1 ends on the last position: its score there.
    assert torch.allclose(rewards, tensor([[-0.05, 0.9, -0.15], [-0.05, -0.05, 1.95]]))


def test_missing_stop_penalty_hits_only_responses_cut_by_the_length_limit() -> None:
    completions = torch.tensor([[5, EOS], [5, 6]])
    lengths = response_lengths(completions, [EOS])
    scores = penalise_missing_stop(tensor([1.0, 1.0]), completions, lengths, [EOS], 0.5)
    assert scores.tolist() == [1.0, 0.5]
    assert penalise_missing_stop(tensor([1.0, 1.0]), completions, lengths, [EOS], None).tolist() == [1.0, 1.0]


# --------------------------------------------------------------------------------------------------
# GAE
# --------------------------------------------------------------------------------------------------


def test_gae_worked_by_hand() -> None:
    # gamma 1, lambda 0.5, V = 0.5 everywhere, reward 1 at the end:
    # delta = (0, 0, 0.5); A2 = 0.5, A1 = 0 + 0.5 x 0.5 = 0.25, A0 = 0.5 x 0.25 = 0.125.
    advantages, returns = core.gae(tensor([[0, 0, 1]]), tensor([[0.5, 0.5, 0.5]]), gamma=1.0, lam=0.5)
    assert advantages[0].tolist() == pytest.approx([0.125, 0.25, 0.5])
    assert returns[0].tolist() == pytest.approx([0.625, 0.75, 1.0])


def gae_by_loops(rewards: list[float], values: list[float], gamma: float, lam: float) -> list[float]:
    """GAE straight from its definition: A_t = sum_k (gamma lam)^k delta_{t+k}."""
    deltas = [
        rewards[t] + gamma * (values[t + 1] if t + 1 < len(values) else 0.0) - values[t]
        for t in range(len(rewards))
    ]
    return [
        sum((gamma * lam) ** k * deltas[t + k] for k in range(len(deltas) - t)) for t in range(len(deltas))
    ]


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 0.95), (0.9, 0.8), (0.99, 0.0), (0.5, 1.0)])
def test_gae_matches_its_definition(gamma: float, lam: float) -> None:
    generator = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(4, 7, generator=generator), torch.randn(4, 7, generator=generator)
    advantages, returns = core.gae(rewards, values, gamma, lam)
    for row in range(4):
        expected = gae_by_loops(rewards[row].tolist(), values[row].tolist(), gamma, lam)
        assert advantages[row].tolist() == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert torch.allclose(returns, advantages + values)


# --------------------------------------------------------------------------------------------------
# Losses
# --------------------------------------------------------------------------------------------------


def test_policy_loss_clips_a_ratio_past_the_range() -> None:
    old = torch.log(tensor([[0.5, 0.5]]))
    new = torch.log(tensor([[0.75, 0.75]])).requires_grad_()
    mask = torch.tensor([[True, True]])
    # ratio 1.5. A = +1: max(-1.5, -1.2) = -1.2 (clipped: no gradient). A = -1: max(1.5, 1.2) = 1.5.
    result = core.clipped_policy_loss(new, old, tensor([[1.0, -1.0]]), mask, cliprange=0.2)
    assert result.loss.item() == pytest.approx((-1.2 + 1.5) / 2)
    assert result.clipfrac.item() == pytest.approx(0.5)
    assert result.approxkl.item() == pytest.approx(0.5 * math.log(1.5) ** 2)
    assert result.ratio.item() == pytest.approx(1.5)
    result.loss.backward()
    assert new.grad[0, 0] == 0 and new.grad[0, 1] != 0


def test_policy_loss_ignores_positions_outside_the_mask() -> None:
    old, new = tensor([[0.0, -100.0]]), tensor([[0.0, 50.0]])
    result = core.clipped_policy_loss(new, old, tensor([[1.0, 1.0]]), torch.tensor([[True, False]]), 0.2)
    assert result.loss.item() == pytest.approx(-1.0) and torch.isfinite(result.approxkl)


def test_value_loss_takes_the_worse_of_clipped_and_unclipped() -> None:
    # V = 1.0 moved from 0.5, clipped to 0.7; R = 2: max((1 - 2)^2, (0.7 - 2)^2) = 1.69, halved.
    loss, clipfrac = core.clipped_value_loss(
        tensor([[1.0, 9.0]]), tensor([[0.5, 0.0]]), tensor([[2.0, 0.0]]), torch.tensor([[True, False]]), 0.2
    )
    assert loss.item() == pytest.approx(0.845) and clipfrac.item() == 1.0


def test_micro_batch_loss_adds_the_entropy_bonus_and_the_weighted_value_loss() -> None:
    old = torch.log(tensor([[0.5, 0.5]]))
    new = torch.log(tensor([[0.75, 0.75]])).requires_grad_()
    mask = torch.tensor([[True, True]])
    entropy = tensor([[1.0, 3.0]])
    # The policy loss of the clipping case above, (-1.2 + 1.5) / 2 = 0.15, less 0.1 x mean entropy 2.
    policy_only, stats = core.micro_batch_loss(new, entropy, old, tensor([[1.0, -1.0]]), mask, 0.2, 0.1)
    assert policy_only.item() == pytest.approx(0.15 - 0.2)
    assert stats["loss/policy_avg"].item() == pytest.approx(0.15) and "loss/value_avg" not in stats
    # The value case above (0.845) at vf_coef 0.5; the policy's term weighed 0 keeps its gradient at 0.
    value = core.ValueTerms(
        tensor([[1.0, 9.0]]),
        tensor([[0.5, 0.0]]),
        tensor([[2.0, 0.0]]),
        torch.tensor([[True, False]]),
        0.2,
        0.5,
    )
    warming, stats = core.micro_batch_loss(
        new, entropy, old, tensor([[1.0, -1.0]]), mask, 0.2, 0.1, value, policy_weight=0.0
    )
    assert warming.item() == pytest.approx(0.5 * 0.845)
    assert stats["loss/value_avg"].item() == pytest.approx(0.845) and stats["val/clipfrac_avg"].item() == 1.0
    warming.backward()
    assert (new.grad == 0).all()


def test_explained_variance() -> None:
    returns = tensor([[1.0, 2.0, 3.0]])
    mask = torch.tensor([[True, True, True]])
    assert core.explained_variance(returns, returns, mask).item() == pytest.approx(1.0)
    assert core.explained_variance(torch.zeros_like(returns), returns, mask).item() == pytest.approx(0.0)
    assert math.isnan(core.explained_variance(returns, torch.ones_like(returns), mask).item())


# --------------------------------------------------------------------------------------------------
# A rollout's advantages
# --------------------------------------------------------------------------------------------------


def small_rollout() -> Rollout:
    completions = torch.tensor([[5, EOS, PAD], [5, 6, 7]])
    return Rollout(
        prompt_ids=torch.tensor([[PAD, 1, 3], [1, 3, 4]]),
        prompt_mask=torch.tensor([[False, True, True], [True, True, True]]),
        completion_ids=completions,
        lengths=response_lengths(completions, [EOS]),
        row_indices=torch.tensor([0, 1]),
        logprobs=tensor([[-1.0, -0.5, 9.0], [-1.0, -1.0, -1.0]]),
        ref_logprobs=tensor([[-1.5, -0.5, -9.0], [-1.0, -2.0, -1.0]]),
        values=tensor([[0.1, 0.2, 0.3], [0.1, 0.2, 0.3]]),
        scores=tensor([1.0, 0.0]),
        per_function=tensor([[1.0], [0.0]]),
    )


def test_advantages_use_only_each_response_and_its_value_position() -> None:
    settings = AdvantageSettings(
        kl_coef=0.1, kl_estimator="k1", gamma=1.0, lam=1.0, whiten_rewards=False, whiten_advantages=False
    )
    rollout = estimate_advantages(small_rollout(), settings)
    # Row 0 ends at 1: log-probs past it are zeroed (so the 9.0 there adds no KL); its value mask runs to 2.
    assert torch.allclose(rollout.kl, tensor([[0.5, 0.0, 0.0], [0.0, 1.0, 0.0]]))
    assert torch.allclose(rollout.values, tensor([[0.1, 0.2, 0.3], [0.1, 0.2, 0.3]]))
    # Row 0: rewards (-0.05, 0, 1); lambda = gamma = 1, so A_t = sum of rewards from t - V_t.
    assert rollout.advantages[0].tolist() == pytest.approx([0.95 - 0.1, 1.0 - 0.2, 0.0])
    assert rollout.returns[0].tolist() == pytest.approx([0.95, 1.0, 1.0])
    # Row 1 hit the length limit: its score (0) sits on its last token; the KL penalty -0.1 at 1.
    assert rollout.advantages[1].tolist() == pytest.approx([-0.1 - 0.1, -0.1 - 0.2, 0.0 - 0.3])
    whitened = estimate_advantages(
        small_rollout(), AdvantageSettings(**{**settings.__dict__, "whiten_advantages": True})
    )
    valid = whitened.response_mask
    assert core.masked_mean(whitened.advantages, valid).item() == pytest.approx(0.0, abs=1e-6)
    assert whitened.advantages[0, 2].item() == 0.0


def test_sequences_attend_to_the_prompt_and_the_response_up_to_its_stop() -> None:
    rollout = small_rollout()
    ids, attention = join_sequences(
        rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids, rollout.lengths
    )
    assert ids.tolist() == [[PAD, 1, 3, 5, EOS, PAD], [1, 3, 4, 5, 6, 7]]
    assert attention.int().tolist() == [[0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]]
    part = rollout.select(torch.tensor([1]))
    assert part.size == 1 and part.completion_ids.tolist() == [[5, 6, 7]] and part.scores.tolist() == [0.0]
