"""The private methods of transformers' `Trainer` that llm_rl's own training loop (PPO) calls, in one
place. Each has a test (tests/training/test_trainer_internals.py) that fails when its behaviour changes
in a transformers release, and none has a public counterpart:

- `_save_checkpoint`: a whole checkpoint (weights through `save_model`, optimizer and scheduler, RNG
  states, `trainer_state.json`, DeepSpeed's engine state) into `_get_output_dir(trial)/checkpoint-<step>`.
  `save_model`, the public method, writes the weights alone.
- `_load_optimizer_and_scheduler`, `_load_scaler`, `_load_rng_state`: reading those back, the part of
  `train(resume_from_checkpoint=...)` that a loop of its own needs without Trainer's loop.

The methods llm_rl overrides are private too, and tested there as well: `Trainer._get_output_dir`
(`StagedCheckpoints`: checkpoints are written into `.staging`) and TRL's
`GRPOTrainer._calculate_rewards` (`GroupMetrics`: the spread of rewards within groups).
"""

from __future__ import annotations

from transformers import Trainer


def save_checkpoint(trainer: Trainer) -> None:
    """Write the trainer's checkpoint for its current step, as `Trainer`'s own loop does at a save."""
    trainer._save_checkpoint(trainer.model_wrapped, trial=None)


def load_optimizer_scheduler_and_scaler(trainer: Trainer, checkpoint: str) -> None:
    """Read the optimizer's, the learning-rate scheduler's and the gradient scaler's states back."""
    trainer._load_optimizer_and_scheduler(checkpoint)
    trainer._load_scaler(checkpoint)


def load_rng_state(trainer: Trainer, checkpoint: str) -> None:
    """Put the Python, NumPy, torch (and CUDA) random generators back as they were at the checkpoint."""
    trainer._load_rng_state(checkpoint)
