"""The one place that imports TRL's PPO (trl.experimental.ppo, removed from TRL after 1.12.0).

A later replacement of TRL's PPO touches this module alone. Besides the trainer and its config, our
update loop (`llm_rl.ppo_trainer`) reuses TRL's own PPO pieces: generation, the masked statistics,
response truncation and the per-token reward/value read-out.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import trl.experimental.ppo.ppo_trainer as _trl_ppo_trainer  # noqa: E402
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


@contextmanager
def deepspeed_leaves_alone(kind: type) -> Iterator[None]:
    """While TRL's `PPOTrainer.__init__` runs, keep its DeepSpeed set-up off reward "models" of type `kind`.

    Under DeepSpeed TRL wraps the reward model in an inference engine (`prepare_deepspeed`), which reads
    a transformers config and needs weights. Our reward step (`RewardAdapter`) calls reward functions and
    has neither, so it stays as it is; the reference model is prepared as before. TRL's PPO is frozen at
    1.12.0 (DESIGN.md), so the name replaced here cannot move.
    """
    prepare = _trl_ppo_trainer.prepare_deepspeed

    def prepare_unless_kind(model: Any, accelerator: Any) -> Any:
        return model if isinstance(model, kind) else prepare(model, accelerator)

    _trl_ppo_trainer.prepare_deepspeed = prepare_unless_kind
    try:
        yield
    finally:
        _trl_ppo_trainer.prepare_deepspeed = prepare


__all__ = [
    "INVALID_LOGPROB",
    "OnlineTrainerState",
    "PPOConfig",
    "PPOTrainer",
    "batch_generation",
    "deepspeed_leaves_alone",
    "first_true_indices",
    "forward",
    "get_reward",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "truncate_response",
]
