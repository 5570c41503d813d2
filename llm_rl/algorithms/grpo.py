"""GRPO: TRL's `GRPOTrainer`, declared (Shao et al. 2024, DeepSeekMath).

Each completion's advantage is its reward relative to the other completions of its prompt, divided by
their spread (`grpo.scale_rewards`); the KL to the reference model is a loss term weighed by `grpo.beta`
(TRL's default 0: no reference model). The recipe's `grpo:` section takes `GRPOConfig` fields by name.
"""

from __future__ import annotations

from trl import GRPOConfig

from llm_rl.algorithms.base import Idea
from llm_rl.algorithms.trl_groups.declaration import GroupTrainer

GRPO = GroupTrainer(
    NAME="grpo",
    config_class=GRPOConfig,
    kl_meaning="GRPO's beta weighs a KL loss term",
    advantage_key="scale_rewards",
    advantage_values={"group": "group", "batch": "batch", "none": "none"},
    lacks={
        Idea.CRITIC: "GRPO has no critic",
        Idea.VALUE_LOSS: "GRPO has no value loss",
        Idea.GAE: "GRPO's advantage is the group-normalised reward, not GAE",
        Idea.ESTIMATOR: "GRPO's advantage is always the group-standardised reward (PPO's estimator: group)",
    },
)
