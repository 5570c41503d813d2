"""Reward functions: one interface for GRPO and PPO, built from a recipe's `rewards:` list.

Every reward has TRL's GRPO signature, `fn(prompts, completions, completion_ids=None, **columns)`, and
returns one float or None (not applicable) per completion; dataset columns arrive as keyword arguments
(the GSM8K-style ground truth in `answer`). Built-ins: `accuracy`, `format`, `length`, `reward_model`;
any other function by import path `package.module:function`. Each built function is wrapped in a
`CheckedReward` that rejects (or, with `on_invalid: skip`, drops and counts) values that are not finite.
"""

from llm_rl.rewards.base import RewardFunction, completion_text
from llm_rl.rewards.checked import CheckedReward
from llm_rl.rewards.registry import REWARDS, RewardSet, build_reward_functions, get_reward

__all__ = [
    "REWARDS",
    "CheckedReward",
    "RewardFunction",
    "RewardSet",
    "build_reward_functions",
    "completion_text",
    "get_reward",
]
