"""The one place that imports TRL's PPO (trl.experimental.ppo, removed from TRL after 1.12.0).

A later replacement of TRL's PPO touches this module alone. Besides the trainer and its config, our
update loop (`llm_rl.ppo_trainer`) reuses TRL's own PPO pieces: generation, the masked statistics,
response truncation and the per-token reward/value read-out.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from trl.experimental.ppo import PPOConfig, PPOTrainer  # noqa: E402
from trl.experimental.ppo.ppo_trainer import (  # noqa: E402
    INVALID_LOGPROB,
    OnlineTrainerState,
    batch_generation,
    forward,
    masked_mean,
    masked_var,
    masked_whiten,
    truncate_response,
)
from trl.experimental.utils import first_true_indices, get_reward  # noqa: E402

__all__ = [
    "INVALID_LOGPROB",
    "OnlineTrainerState",
    "PPOConfig",
    "PPOTrainer",
    "batch_generation",
    "first_true_indices",
    "forward",
    "get_reward",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "truncate_response",
]
