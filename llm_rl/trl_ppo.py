"""The one place that imports TRL's PPO (trl.experimental.ppo, removed from TRL after 1.12.0).

A later replacement of TRL's PPO touches this module alone.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from trl.experimental.ppo import PPOConfig, PPOTrainer  # noqa: E402
from trl.experimental.utils import get_reward  # noqa: E402

__all__ = ["PPOConfig", "PPOTrainer", "get_reward"]
