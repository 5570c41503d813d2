"""RLOO: TRL's `RLOOTrainer`, declared (REINFORCE Leave-One-Out, Ahmadian et al. 2024).

Like GRPO it samples a group of completions per prompt and needs no critic; each completion's
baseline is the mean reward of the other completions of its prompt, and the KL to the reference model
is a penalty on the reward (`rloo.beta`, TRL's default 0.05) rather than a loss term. The recipe's
`rloo:` section takes `RLOOConfig` fields by name.
"""

from __future__ import annotations

from trl import RLOOConfig

from llm_rl.algorithms.base import Idea
from llm_rl.algorithms.trl_groups.declaration import GroupTrainer

RLOO = GroupTrainer(
    NAME="rloo",
    config_class=RLOOConfig,
    kl_meaning="RLOO's beta subtracts the sequence's KL to the reference from its reward",
    advantage_key="normalize_advantages",
    advantage_values={"batch": True, "none": False},
    # TRL's default group is 2, which leaves a one-sample baseline: a converted recipe gets up to 8.
    migrated_group_size=8,
    lacks={
        Idea.CRITIC: "RLOO has no critic: the other completions of the prompt give the baseline",
        Idea.VALUE_LOSS: "RLOO has no value loss",
        Idea.GAE: "RLOO's advantage is the leave-one-out reward, not GAE",
        Idea.ESTIMATOR: "RLOO's advantage is always the leave-one-out reward (PPO's estimator: leave_one_out)",
        Idea.LOSS_AGGREGATION: "RLOO's loss is one clipped ratio per completion",
        Idea.SEQUENCE_RATIO: "RLOO's ratio is per sequence already",
    },
)
