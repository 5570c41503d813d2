"""The advantage estimators of llm_rl's loop (llm_rl.algorithms.ppo.estimators): small cases worked out by
hand, and each critic-free estimator against its definition written as plain loops over sequences and
tokens."""

from __future__ import annotations

import math
import random

import pytest
import torch

from llm_rl.algorithms.ppo import core
from llm_rl.algorithms.ppo.estimators import (
    ESTIMATORS,
    GROUP_STD_EPSILON,
    AdvantageInputs,
    discounted_returns,
    find_estimator,
    global_whiten,
    group_standardised,
    grouped,
    less_group_mean,
    less_mean_of_others,
    outcome_rewards,
)


def tensor(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def inputs(scores, kl, lengths, kl_coef=0.0, gamma=1.0, group_size=1) -> AdvantageInputs:
    return AdvantageInputs(
        scores=tensor(scores),
        kl=tensor(kl),
        lengths=torch.tensor(lengths),
        kl_coef=kl_coef,
        gamma=gamma,
        group_size=group_size,
    )


# --------------------------------------------------------------------------------------------------
# The steps, by hand
# --------------------------------------------------------------------------------------------------


def test_group_baselines_by_hand() -> None:
    assert less_group_mean(tensor([1, 0, 0, 0]), 2).tolist() == [0.5, -0.5, 0.0, 0.0]
    assert less_mean_of_others(tensor([3, 0, 0]), 3).tolist() == [3.0, -1.5, -1.5]
    standardised = group_standardised(tensor([1, 0, 3, 3]), 2)
    # Group (1, 0): mean 0.5, unbiased std sqrt(0.5); group (3, 3): no spread, so no advantage.
    expected = 0.5 / (math.sqrt(0.5) + GROUP_STD_EPSILON)
    assert standardised.tolist() == pytest.approx([expected, -expected, 0.0, 0.0])


@pytest.mark.parametrize(("count", "size"), [(4, 1), (5, 2)])
def test_scores_that_do_not_form_groups_are_refused(count: int, size: int) -> None:
    with pytest.raises(ValueError, match=f"do not split into groups of {size}"):
        grouped(torch.zeros(count), size)


def test_outcome_rewards_put_the_score_on_the_last_token_and_the_penalty_on_every_token() -> None:
    rewards = outcome_rewards(
        tensor([2, 1]), tensor([[-0.1, -0.1, -0.1], [-0.2, -0.2, -0.2]]), torch.tensor([1, 2])
    )
    torch.testing.assert_close(rewards, tensor([[-0.1, 1.9, 0.0], [-0.2, -0.2, 0.8]]))


def test_discounted_returns_by_hand() -> None:
    mask = core.response_masks(torch.tensor([2]), 4)[0]
    returns = discounted_returns(tensor([[1, 2, 3, 9]]), mask, gamma=0.5)
    assert returns.tolist() == [[1 + 0.5 * (2 + 0.5 * 3), 2 + 0.5 * 3, 3.0, 0.0]]


def test_global_whitening_pools_the_processes_statistics() -> None:
    """Two processes with the same half-batch: the pooled statistics are those of the whole batch."""
    half = tensor([[1, 2, 0], [4, 0, 0]])
    mask = core.response_masks(torch.tensor([1, 0]), 3)[0]
    both = torch.cat([half, half])
    expected = core.masked_whiten(both, torch.cat([mask, mask])).masked_fill(~torch.cat([mask, mask]), 0.0)
    pooled = global_whiten(half, mask, all_reduce=lambda totals: 2 * totals)
    torch.testing.assert_close(pooled, expected[:2])
    alone = global_whiten(half, mask, all_reduce=lambda totals: totals)
    assert not torch.allclose(alone, pooled), "one process alone has other statistics"


# --------------------------------------------------------------------------------------------------
# The estimators, by hand
# --------------------------------------------------------------------------------------------------


def test_reinforce_pp_whitens_the_returns_over_the_batch() -> None:
    # Returns 1, 1 (first response) and 0 (second): mean 2/3, unbiased variance 1/3.
    advantages, returns = ESTIMATORS["reinforce_pp"].estimate(inputs([1, 0], [[0, 0], [0, 0]], [1, 0]))
    assert returns.tolist() == [[1.0, 1.0], [0.0, 0.0]]
    high, low = (1 - 2 / 3) / math.sqrt(1 / 3), (0 - 2 / 3) / math.sqrt(1 / 3)
    torch.testing.assert_close(advantages, tensor([[high, high], [low, 0.0]]))


def test_leave_one_out_keeps_the_kl_per_token_and_is_not_whitened() -> None:
    case = inputs([1, 0], [[0.2, 0.2], [0, 0]], [1, 1], kl_coef=0.5, group_size=2)
    advantages, returns = ESTIMATORS["leave_one_out"].estimate(case)
    # Baselines 0 and 1: shaped scores 1 and -1; the first response pays 0.1 of KL at each token.
    torch.testing.assert_close(advantages, tensor([[0.8, 0.9], [-1.0, -1.0]]))
    torch.testing.assert_close(advantages, returns)


def test_gae_needs_the_critic() -> None:
    with pytest.raises(ValueError, match="critic"):
        ESTIMATORS["gae"].estimate(inputs([1], [[0, 0]], [1]))


# --------------------------------------------------------------------------------------------------
# The estimators against their definitions as loops
# --------------------------------------------------------------------------------------------------


def shaped_by_loops(name: str, scores: list[float], size: int) -> list[float]:
    shaped = []
    for i, score in enumerate(scores):
        group = scores[i - i % size : i - i % size + size]
        mean = sum(group) / size
        if name == "reinforce_pp":
            shaped.append(score)
        elif name == "reinforce_pp_baseline":
            shaped.append(score - mean)
        elif name == "group":
            std = math.sqrt(sum((s - mean) ** 2 for s in group) / (size - 1))
            shaped.append((score - mean) / (std + GROUP_STD_EPSILON))
        else:
            shaped.append(score - (sum(group) - score) / (size - 1))
    return shaped


def estimate_by_loops(name, scores, kl, lengths, kl_coef, gamma, size):
    """The definition: per-token reward -kl_coef KL_t (+ the shaped score at the last token), returns
    summed from the end, whitened over every token of the batch for REINFORCE++ and its baseline."""
    gamma = gamma if name == "reinforce_pp" else 1.0
    shaped = shaped_by_loops(name, scores, size)
    returns = []
    for i, length in enumerate(lengths):
        row, running = [0.0] * len(kl[i]), 0.0
        for t in reversed(range(length + 1)):
            reward = -kl_coef * kl[i][t] + (shaped[i] if t == length else 0.0)
            running = reward + gamma * running
            row[t] = running
        returns.append(row)
    if name not in ("reinforce_pp", "reinforce_pp_baseline"):
        return returns, returns
    valid = [returns[i][t] for i, length in enumerate(lengths) for t in range(length + 1)]
    mean = sum(valid) / len(valid)
    std = math.sqrt(sum((v - mean) ** 2 for v in valid) / (len(valid) - 1) + 1e-8)
    advantages = [
        [(value - mean) / std if t <= length else 0.0 for t, value in enumerate(row)]
        for row, length in zip(returns, lengths, strict=True)
    ]
    return advantages, returns


@pytest.mark.parametrize("name", ["reinforce_pp", "reinforce_pp_baseline", "group", "leave_one_out"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_critic_free_estimator_matches_its_definition(name: str, seed: int) -> None:
    rng = random.Random(seed)
    size, width = 4, 7
    count = 3 * size
    scores = [rng.choice([0.0, 0.5, 1.0, rng.uniform(-2, 2)]) for _ in range(count)]
    kl = [[rng.uniform(0, 0.3) for _ in range(width)] for _ in range(count)]
    lengths = [rng.randrange(width) for _ in range(count)]
    kl = [
        [value if t <= length else 0.0 for t, value in enumerate(row)]
        for row, length in zip(kl, lengths, strict=True)
    ]
    case = inputs(scores, kl, lengths, kl_coef=0.05, gamma=0.9, group_size=size)

    advantages, returns = ESTIMATORS[name].estimate(case)
    expected_advantages, expected_returns = estimate_by_loops(name, scores, kl, lengths, 0.05, 0.9, size)
    torch.testing.assert_close(returns, tensor(expected_returns), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(advantages, tensor(expected_advantages), atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------------


def test_the_registry_says_what_each_estimator_needs() -> None:
    needs = {name: (e.needs_critic, e.needs_groups) for name, e in ESTIMATORS.items()}
    assert needs == {
        "gae": (True, False),
        "reinforce_pp": (False, False),
        "reinforce_pp_baseline": (False, True),
        "group": (False, True),
        "leave_one_out": (False, True),
    }
    assert all(estimator.reference for estimator in ESTIMATORS.values())


@pytest.mark.parametrize(
    ("spelling", "name"),
    [
        ("reinforce", "reinforce_pp"),
        ("REINFORCE++", "reinforce_pp"),
        ("grpo", "group"),
        ("rloo", "leave_one_out"),
    ],
)
def test_the_spellings_of_trl_openrlhf_and_verl_find_the_same_estimator(spelling: str, name: str) -> None:
    assert find_estimator(spelling) is ESTIMATORS[name]


def test_an_unknown_estimator_is_refused_with_the_known_names() -> None:
    with pytest.raises(ValueError, match="unknown advantage estimator 'vtrace'; known: gae, reinforce_pp"):
        find_estimator("vtrace")


@pytest.mark.parametrize("lengths", [[0], []])
def test_global_whitening_of_one_token_or_none_is_finite(lengths: list[int]) -> None:
    values = tensor([[3.0, 0.0]] * len(lengths)).reshape(len(lengths), 2)
    mask = core.response_masks(torch.tensor(lengths, dtype=torch.long), 2)[0]
    whitened = global_whiten(values, mask, all_reduce=lambda totals: totals)
    assert torch.isfinite(whitened).all() and not whitened.any()
