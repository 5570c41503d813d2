"""The private methods of transformers', TRL's and accelerate's classes that llm_rl calls or overrides
(`llm_rl.training.trainer_internals`), each held to the behaviour llm_rl relies on, with a real
`Trainer` on the tiny model: a release that changes one fails here, not in a user's resumed run."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
from trl import GRPOTrainer

from llm_rl.models.tiny import tiny_model_path
from llm_rl.training.checkpoints import STAGING_DIR, StagedCheckpoints
from llm_rl.training.trainer_internals import (
    load_optimizer_scheduler_and_scaler,
    load_rng_state,
    save_checkpoint,
)

# Also run at the lowest versions pyproject.toml admits (`make test-floors`).
pytestmark = pytest.mark.floors

CHECKPOINT_FILES = {
    "model.safetensors",
    "optimizer.pt",
    "scheduler.pt",
    "rng_state.pth",
    "trainer_state.json",
    "training_args.bin",
}


def trainer_after_a_step(output: Path, trainer_class: type[Trainer] = Trainer) -> Trainer:
    """A Trainer on the tiny model whose optimizer and scheduler have taken one step (states not empty)."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path())
    args = TrainingArguments(
        output_dir=str(output), use_cpu=True, learning_rate=1e-3, lr_scheduler_type="linear", report_to=[]
    )
    trainer = trainer_class(model=model, args=args, train_dataset=Dataset.from_dict({"input_ids": [[1, 2]]}))
    trainer.create_optimizer_and_scheduler(num_training_steps=10)
    take_a_step(trainer)
    trainer.state.global_step = 3
    return trainer


def take_a_step(trainer: Trainer) -> None:
    ids = torch.tensor([[1, 2, 3, 4]])
    trainer.model(input_ids=ids, labels=ids).loss.backward()
    trainer.optimizer.step()
    trainer.lr_scheduler.step()
    trainer.optimizer.zero_grad()


def optimizer_tensors(trainer: Trainer) -> list[torch.Tensor]:
    return [value.clone() for state in trainer.optimizer.state.values() for value in state.values()]


def test_save_checkpoint_writes_a_whole_checkpoint_for_the_current_step(tmp_path: Path) -> None:
    trainer = trainer_after_a_step(tmp_path)
    save_checkpoint(trainer)
    checkpoint = tmp_path / "checkpoint-3"
    assert {path.name for path in checkpoint.iterdir()} >= CHECKPOINT_FILES


def test_the_loads_put_optimizer_scheduler_and_rng_back_as_saved(tmp_path: Path) -> None:
    trainer = trainer_after_a_step(tmp_path)
    save_checkpoint(trainer)
    saved_optimizer, saved_lr = optimizer_tensors(trainer), trainer.lr_scheduler.get_last_lr()
    draws_after_the_save = torch.rand(4)

    take_a_step(trainer)
    torch.manual_seed(1234)
    assert trainer.lr_scheduler.get_last_lr() != saved_lr

    checkpoint = str(tmp_path / "checkpoint-3")
    load_optimizer_scheduler_and_scaler(trainer, checkpoint)
    load_rng_state(trainer, checkpoint)
    assert trainer.lr_scheduler.get_last_lr() == saved_lr
    for loaded, saved in zip(optimizer_tensors(trainer), saved_optimizer, strict=True):
        torch.testing.assert_close(loaded, saved)
    torch.testing.assert_close(torch.rand(4), draws_after_the_save)


def test_staged_checkpoints_redirect_the_checkpoint_folder(tmp_path: Path) -> None:
    """`Trainer._get_output_dir(trial)`, overridden: checkpoints are written into `.staging`."""
    assert list(inspect.signature(Trainer._get_output_dir).parameters) == ["self", "trial"]

    class StagedTrainer(StagedCheckpoints, Trainer):
        pass

    save_checkpoint(trainer_after_a_step(tmp_path, StagedTrainer))
    assert not (tmp_path / "checkpoint-3").exists()
    assert {path.name for path in (tmp_path / STAGING_DIR / "checkpoint-3").iterdir()} >= CHECKPOINT_FILES


def test_grpo_calculate_rewards_takes_what_group_metrics_passes() -> None:
    """`GRPOTrainer._calculate_rewards`, overridden by `GroupMetrics`, which passes these arguments on and
    reads a (completions x reward functions) tensor back (tests/algorithms/test_grpo.py runs it)."""
    parameters = list(inspect.signature(GRPOTrainer._calculate_rewards).parameters)
    assert parameters == ["self", "inputs", "prompts", "completions", "completion_ids_list"]


@pytest.mark.parametrize("sync", [False, True])
def test_accelerators_public_sync_setter_is_what_backward_reads(sync: bool) -> None:
    """PPO marks the last micro-batch of an accumulation with `accelerator.sync_gradients` (public)."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    accelerator.sync_gradients = sync
    assert accelerator.gradient_state.sync_gradients is sync
