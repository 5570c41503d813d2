"""Saving and resuming PPO's models, mixed into `PPOTrainer`: the policy, the critic beside it in
`value_model/`, and an exact resume (weights, optimizer, scheduler, counters, data position, RNG)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import torch
from transformers import TrainerState
from transformers.integrations.deepspeed import deepspeed_load_checkpoint
from transformers.trainer import TRAINER_STATE_NAME, TRAINING_ARGS_NAME

from llm_rl.run_folder import VALUE_MODEL_DIR
from llm_rl.training.checkpoint_files import load_weights
from llm_rl.training.trainer_internals import load_optimizer_scheduler_and_scaler, load_rng_state


class PolicyAndCriticSaving:
    """`save_model` and `resume` for a trainer whose `model` is a `PolicyAndCritic`. Reads the trainer's
    `args`, `accelerator`, `model`, `model_wrapped`, `saved_tokenizer`, `state` and `is_peft_model`."""

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """The policy as a `save_pretrained` folder (a LoRA adapter with LoRA), the critic (if any) in
        `value_model/`, and the tokenizer the user gave.

        One path for plain, DDP and DeepSpeed runs: accelerate hands over the full weights of both models
        (every rank takes part, as ZeRO-3 gathers shards), and the main process saves each model's part.
        """
        output_dir = output_dir or self.args.output_dir
        weights = self.accelerator.get_state_dict(self.model_wrapped)
        if not self.args.should_save:
            return
        parts = [(self.model.policy, "policy.", output_dir)]
        if self.has_critic:
            parts.append((self.model.critic, "critic.", os.path.join(output_dir, VALUE_MODEL_DIR)))
        for module, prefix, folder in parts:
            own = {
                key.removeprefix(prefix): value for key, value in weights.items() if key.startswith(prefix)
            }
            module.save_pretrained(folder, state_dict=own, safe_serialization=True)
        self.saved_tokenizer.save_pretrained(output_dir)
        torch.save(self.args, os.path.join(output_dir, TRAINING_ARGS_NAME))

    def resume(self, checkpoint: str, batches: Iterator[dict[str, torch.Tensor]]) -> None:
        """Continue exactly from a checkpoint: weights, optimizer, scheduler, counters, data position, RNG."""
        if self.is_deepspeed_enabled:
            # The engine's own checkpoint holds both models and its (possibly sharded) optimizer.
            deepspeed_load_checkpoint(
                self.model_wrapped, checkpoint, load_module_strict=not self.is_peft_model
            )
        else:
            load_weights(self.model.policy, Path(checkpoint))
            if self.has_critic:
                load_weights(self.model.critic, Path(checkpoint) / VALUE_MODEL_DIR)
        load_optimizer_scheduler_and_scaler(self, checkpoint)
        saved = TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME))
        self.state.global_step = saved.global_step
        self.state.epoch = saved.epoch
        self.state.log_history = saved.log_history
        for _ in range(saved.global_step):
            next(batches)
        load_rng_state(self, checkpoint)
