"""What the reward tests share: calling a reward the way TRL's GRPOTrainer does."""

from __future__ import annotations


def call(reward, completions: list, **columns) -> list[float | None]:
    """Call a reward the way TRL's GRPOTrainer does, with its extra keyword arguments."""
    return reward(
        prompts=["Q:"] * len(completions),
        completions=completions,
        completion_ids=None,
        trainer_state=None,
        log_extra=lambda column, values: None,
        log_metric=lambda name, value: None,
        **columns,
    )
