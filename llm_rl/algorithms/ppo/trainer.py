"""llm_rl's PPO trainer: PPO's clipped objective on accelerate, with a critic and GAE, or with a
critic-free advantage estimator (REINFORCE++, group baselines: `ppo.advantage_estimator`).

Each update is a fixed sequence of steps, each in a module of its own:

1-4. **a rollout** (`rollout_maker.RolloutMaker`): generate `ppo.num_generations` completions per prompt
   in consecutive rows, score them with the recipe's reward functions, evaluate the response tokens
   under the policy, the reference model and the critic, if any (no grad, response positions only:
   `forward`), and estimate advantages with the registered estimator (`rollout`, maths in `core` and
   `estimators`);
5. **optimise** (`optimization.PPOOptimization`): `num_ppo_epochs` passes over the rollout in
   `num_mini_batches` shuffled mini-batches, one optimizer step per mini-batch, each accumulated over
   micro-batches of `training.per_device_batch_size` (the loss: `core.micro_batch_loss`); policy and
   critic gradients clipped apart;
6. **log, save, stop** through transformers' callbacks, as every `Trainer` does (the metrics and their
   collectives: `update_metrics`; the saved models and the exact resume: `saving`).

`Trainer` supplies the accelerator (DDP, DeepSpeed ZeRO-2/3), the optimizer and scheduler factories,
checkpoint saving and loading (its private methods only through `llm_rl.training.trainer_internals`),
and the callback machinery; the loop and the maths are ours. The `ppo:` keys keep the names and
defaults of TRL's former PPOTrainer (`llm_rl.algorithms.ppo.settings.PPOSettings`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
from datasets import Dataset
from torch.utils.data import DataLoader
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Trainer,
    TrainerState,
    TrainingArguments,
)
from transformers.integrations.deepspeed import deepspeed_init
from transformers.trainer_callback import ExportableState
from trl.models.utils import prepare_deepspeed
from trl.trainer.utils import disable_dropout_in_model

from llm_rl.algorithms.ppo.forward import PolicyAndCritic
from llm_rl.algorithms.ppo.optimization import PPOOptimization
from llm_rl.algorithms.ppo.rollout import Rollout
from llm_rl.algorithms.ppo.rollout_maker import PromptCollator, RolloutMaker
from llm_rl.algorithms.ppo.saving import PolicyAndCriticSaving
from llm_rl.algorithms.ppo.settings import PPOSettings
from llm_rl.algorithms.ppo.update_metrics import update_metrics
from llm_rl.generation.generators import build_generator
from llm_rl.generation.sampling import Generator, SamplingSettings
from llm_rl.generation.vllm_settings import EngineSettings, VLLMInputs
from llm_rl.rewards.scoring import RewardAdapter
from llm_rl.training.args import checkpointing_field
from llm_rl.training.checkpoints import StagedCheckpoints
from llm_rl.training.evaluation import EvaluateAtStart, HeldOutReward
from llm_rl.training.trainer_internals import save_checkpoint


class PPOTrainer(PPOOptimization, PolicyAndCriticSaving, StagedCheckpoints, Trainer):
    """PPO over a prompt dataset with reward functions, a critic and a frozen reference (module docstring)."""

    def __init__(
        self,
        *,
        args: TrainingArguments,
        settings: PPOSettings,
        policy: PreTrainedModel,
        critic: PreTrainedModel | None,
        reference: PreTrainedModel | None,
        rewards: RewardAdapter,
        prompts: Dataset,
        tokenizer: PreTrainedTokenizerBase,
        sampling: SamplingSettings,
        whiten_advantages: bool = True,
        saved_tokenizer: PreTrainedTokenizerBase | None = None,
        callbacks: list | None = None,
        peft_config: Any = None,
        held_out: HeldOutReward | None = None,
        generation_batch_size: int | None = None,
        vllm_engine: EngineSettings | None = None,
    ) -> None:
        """`args` is a `TrainingArguments` whose `gradient_accumulation_steps` counts the micro-batches of one
        mini-batch; `prompts` has `input_ids` and `row_index`; `critic` is None for a critic-free
        estimator; `reference` is None with LoRA (the policy with its adapter off stands in);
        `saved_tokenizer` (default: `tokenizer`) goes into saved folders;
        `generation_batch_size` (`generation.batch_size`) prompts go to each generate call, by default
        the no-grad forward's chunk (with vLLM: the most sequences its engine runs at once);
        `vllm_engine` starts the engine for `generation.backend: vllm`."""
        if peft_config is not None:
            from peft import get_peft_model

            policy = get_peft_model(policy, peft_config)
        self.is_peft_model = peft_config is not None
        if reference is None and not self.is_peft_model:
            raise ValueError(
                "PPO needs a reference model, or LoRA (the adapter-free policy is the reference)"
            )
        for model in (policy, critic, reference):
            if model is not None:
                disable_dropout_in_model(model)
        super().__init__(
            model=PolicyAndCritic(policy, critic),
            args=args,
            processing_class=tokenizer,
            train_dataset=prompts,
            data_collator=PromptCollator(sampling.pad_token_id),
            callbacks=callbacks,
        )
        self.settings = settings
        self.rewards = rewards
        self.sampling = sampling
        self.whiten_advantages = whiten_advantages
        self.saved_tokenizer = saved_tokenizer or tokenizer
        self.held_out = held_out
        if held_out is not None and held_out.at_start:
            self.add_callback(EvaluateAtStart(self, held_out, policy_of=lambda m: m.policy))
        self.reference = self.prepare_reference(reference)
        self.generation_batch_size = generation_batch_size
        generator = build_generator(
            lambda: self.model_wrapped,
            self.accelerator,
            sampling,
            chunk_size=self.generation_chunk_size,
            gather_zero3=settings.ds3_gather_for_generation,
            vllm=None if vllm_engine is None else VLLMInputs(self.model.policy, tokenizer, vllm_engine),
        )
        self.rollouts = RolloutMaker(
            models=self.model,
            reference=self.reference,
            generator=generator,
            rewards=rewards,
            settings=settings,
            sampling=sampling,
            accelerator=self.accelerator,
            forward_chunk_size=self.forward_chunk_size,
            whiten_advantages=whiten_advantages,
        )
        self._clip_groups: dict[str, list[torch.nn.Parameter]] | None = None

    # ------------------------------------------------------------------------------------------------
    # Set-up
    # ------------------------------------------------------------------------------------------------

    @property
    def local_batch_size(self) -> int:
        """Prompts per update on this process: micro-batch x micro-batches per step x mini-batches."""
        args = self.args
        return (
            args.per_device_train_batch_size
            * args.gradient_accumulation_steps
            * self.settings.num_mini_batches
        )

    @property
    def prompts_per_update(self) -> int:
        """Prompts per update on this process: each is sampled `group_size` times in consecutive rows, so a
        process holds whole groups."""
        return self.local_batch_size // self.settings.group_size

    @property
    def generator(self) -> Generator:
        """The rollouts' generator (`generation.backend`)."""
        return self.rollouts.generator

    @property
    def has_critic(self) -> bool:
        return self.model.critic is not None

    @property
    def forward_chunk_size(self) -> int:
        return min(self.settings.local_rollout_forward_batch_size, self.local_batch_size)

    @property
    def generation_chunk_size(self) -> int:
        """Prompts per generate call: `generation.batch_size`, or the no-grad forward's chunk."""
        return min(self.generation_batch_size or self.forward_chunk_size, self.local_batch_size)

    def prepare_reference(self, reference: PreTrainedModel | None) -> PreTrainedModel | None:
        """The frozen reference model on this process's device (sharded with the policy under ZeRO-3)."""
        if reference is None:
            return None
        reference.requires_grad_(False)
        reference.eval()
        if self.is_deepspeed_enabled:
            return prepare_deepspeed(reference, self.accelerator)
        return reference.to(self.accelerator.device)

    def prepare_for_training(self) -> None:
        """Optimizer and scheduler, then the models wrapped for DDP or DeepSpeed (as `Trainer` does)."""
        max_steps = self.args.max_steps
        if getattr(self.args, checkpointing_field()):
            self.model.gradient_checkpointing_enable(self.args.gradient_checkpointing_kwargs)
        if self.is_deepspeed_enabled:
            # Fills the DeepSpeed config's "auto" values from the arguments, then builds our optimizer.
            self.optimizer, self.lr_scheduler = deepspeed_init(self, num_training_steps=max_steps)
        else:
            self.create_optimizer()
        if self.is_deepspeed_enabled and type(self.lr_scheduler).__name__ == "DummyScheduler":
            wrapped, self.optimizer, self.lr_scheduler = self.accelerator.prepare(
                self.model, self.optimizer, self.lr_scheduler
            )
        else:
            wrapped, self.optimizer = self.accelerator.prepare(self.model, self.optimizer)
        self.create_scheduler(num_training_steps=max_steps, optimizer=self.optimizer)
        self.model_wrapped = wrapped
        if self.is_deepspeed_enabled:
            self.deepspeed = wrapped
        for name in ("model", "optimizer", "lr_scheduler"):
            setattr(self.callback_handler, name, getattr(self, name))

    def prompt_loader(self) -> DataLoader:
        """Shuffled prompt batches of one update each, with a generator of their own so that a resumed run
        replays the same order."""
        loader = DataLoader(
            self.train_dataset,
            batch_size=self.prompts_per_update,
            shuffle=True,
            collate_fn=self.data_collator,
            drop_last=True,
            generator=torch.Generator().manual_seed(self.args.seed),
        )
        return self.accelerator.prepare(loader)

    def prompt_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        """Prompt batches forever, epoch after epoch."""
        loader = self.prompt_loader()
        while True:
            yield from loader

    def init_state(self) -> None:
        """A fresh `TrainerState` (a resume then overwrites its counters)."""
        self.state = TrainerState(
            is_local_process_zero=self.is_local_process_zero(),
            is_world_process_zero=self.is_world_process_zero(),
            stateful_callbacks=[
                cb
                for cb in self.callback_handler.callbacks + [self.control]
                if isinstance(cb, ExportableState)
            ],
        )
        self.state.compute_steps(self.args, self.args.max_steps)
        self.state.max_steps = self.args.max_steps
        self.state.num_train_epochs = math.ceil(self.args.max_steps * self.epochs_per_update)

    def rollout_engine(self) -> Any:
        """The colocated vLLM engine rollouts are generated with (evaluation borrows it), or None."""
        return getattr(self.generator, "rollouts", None)

    @property
    def samples_per_update(self) -> int:
        return self.local_batch_size * self.accelerator.num_processes

    @property
    def epochs_per_update(self) -> float:
        """The share of the prompt dataset one update reads."""
        return self.prompts_per_update * self.accelerator.num_processes / len(self.train_dataset)

    # ------------------------------------------------------------------------------------------------
    # The loop
    # ------------------------------------------------------------------------------------------------

    def train(self, resume_from_checkpoint: str | None = None, **_: Any) -> None:
        """PPO updates until the budget is spent or a callback stops training."""
        args = self.args
        self.init_state()
        self.prepare_for_training()
        batches = self.prompt_batches()
        if resume_from_checkpoint is not None:
            self.resume(resume_from_checkpoint, batches)
        self.control = self.callback_handler.on_train_begin(args, self.state, self.control)
        self.model_wrapped.train()
        while self.state.global_step < self.state.max_steps and not self.control.should_training_stop:
            self.control = self.callback_handler.on_step_begin(args, self.state, self.control)
            warming_up = self.warming_up
            self.freeze_policy(warming_up)
            rollout = self.rollout(next(batches))
            stats = self.optimise(rollout)
            self.generator.weights_updated()
            self.state.global_step += 1
            self.state.epoch = self.state.global_step * self.epochs_per_update
            if self.state.global_step % self.state.logging_steps == 0:
                self.log(self.update_metrics(rollout, stats, warming_up))
            self.lr_scheduler.step()
            self.control = self.callback_handler.on_step_end(args, self.state, self.control)
            if self.control.should_save:
                save_checkpoint(self)
                self.control = self.callback_handler.on_save(args, self.state, self.control)
        self.control = self.callback_handler.on_train_end(args, self.state, self.control)

    @property
    def warming_up(self) -> bool:
        """Whether this update is one of the critic's warm-up updates (`ppo.critic_warmup_steps`)."""
        return self.state.global_step < self.settings.warmup_updates

    # ------------------------------------------------------------------------------------------------
    # Rollout: generate, score, evaluate, estimate advantages
    # ------------------------------------------------------------------------------------------------

    def rollout(self, batch: dict[str, torch.Tensor]) -> Rollout:
        """Steps 1-4: generate, score, evaluate, estimate advantages (`RolloutMaker.make`)."""
        return self.rollouts.make(batch)

    # ------------------------------------------------------------------------------------------------
    # Metrics
    # ------------------------------------------------------------------------------------------------

    @torch.no_grad()
    def update_metrics(
        self, rollout: Rollout, stats: dict[str, torch.Tensor], warming_up: bool
    ) -> dict[str, Any]:
        """One update's metrics (`update_metrics`), the learning rate, the warm-up flag with a critic, and
        the held-out reward on evaluation updates."""
        metrics = update_metrics(
            rollout,
            stats,
            accelerator=self.accelerator,
            rewards=self.rewards,
            stop_token_ids=self.sampling.stop_token_ids,
            group_size=self.settings.group_size,
        )
        metrics["lr"] = self.lr_scheduler.get_last_lr()[0]
        if self.has_critic:
            metrics["critic_warmup"] = float(warming_up)
        if self.held_out is not None and self.held_out.due(self.state.global_step):
            metrics.update(
                self.held_out(
                    self.model_wrapped,
                    self.accelerator,
                    policy_of=lambda m: m.policy,
                    engine=self.rollout_engine(),
                )
            )
        return metrics
