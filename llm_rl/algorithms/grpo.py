"""GRPO: TRL's `GRPOTrainer`, declared (Shao et al. 2024, DeepSeekMath).

Each completion's advantage is its reward relative to the other completions of its prompt, divided by
their spread (`grpo.scale_rewards`); the KL to the reference model is a loss term weighed by `grpo.beta`
(TRL's default 0: no reference model). The recipe's `grpo:` section takes `GRPOConfig` fields by name.
"""

from __future__ import annotations

from trl import GRPOConfig

from llm_rl.algorithms.trl_groups.declaration import GroupTrainer

NO_CRITIC = "GRPO has no critic"
NOT_GAE = "GRPO's advantage is the group-normalised reward, not GAE"

GRPO = GroupTrainer(
    NAME="grpo",
    config_class=GRPOConfig,
    trainer_name="GRPOTrainer",
    kl_meaning="GRPO's beta weighs a KL loss term",
    advantage_key="scale_rewards",
    advantage_values={"group": "group", "batch": "batch", "none": "none"},
    missing={
        **dict.fromkeys(("value_model", "critic_learning_rate", "critic_warmup_steps"), NO_CRITIC),
        **dict.fromkeys(("vf_coef", "cliprange_value"), "GRPO has no value loss"),
        **dict.fromkeys(("gamma", "lam"), NOT_GAE),
        "advantage_estimator": "GRPO's advantage is always the group-standardised reward (PPO's estimator: group)",
        "whiten_rewards": "nearest: grpo.scale_rewards",
        "num_mini_batches": "nearest: grpo.steps_per_generation",
        "missing_eos_penalty": "nearest: grpo.mask_truncated_completions",
        "none_reward": "GRPO leaves samples out of a reward that returns None",
    },
)
