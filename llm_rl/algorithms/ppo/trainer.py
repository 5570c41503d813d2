"""llm_rl's PPO trainer: PPO's clipped objective on accelerate, with a critic and GAE, or with a
critic-free advantage estimator (REINFORCE++, group baselines: `ppo.advantage_estimator`).

Each update is a fixed sequence of steps:

1. **generate** completions for a batch of prompts, `ppo.num_generations` per prompt in consecutive rows
   (`llm_rl.generation`);
2. **score** them with the recipe's reward functions (`RewardAdapter`);
3. **evaluate** the response tokens under the policy, the reference model and the critic, if any (no
   grad, response positions only: `llm_rl.algorithms.ppo.forward`);
4. **estimate advantages**: KL penalty, per-token rewards, the registered estimator
   (`llm_rl.algorithms.ppo.rollout`, maths in `llm_rl.algorithms.ppo.core` and `.estimators`);
5. **optimise**: `num_ppo_epochs` passes over the batch in `num_mini_batches` shuffled mini-batches,
   one optimizer step per mini-batch, each accumulated over micro-batches of
   `training.per_device_batch_size`; policy and critic gradients clipped apart;
6. **log, save, stop** through transformers' callbacks, as every `Trainer` does.

`Trainer` supplies the accelerator (DDP, DeepSpeed ZeRO-2/3), the optimizer and scheduler factories,
checkpoint saving and loading, and the callback machinery; the loop and the maths are ours. The `ppo:`
keys keep the names and defaults of TRL's former PPOTrainer (`llm_rl.algorithms.ppo.settings.PPOSettings`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
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
from transformers.integrations.deepspeed import deepspeed_init, deepspeed_load_checkpoint
from transformers.trainer import TRAINER_STATE_NAME, TRAINING_ARGS_NAME
from transformers.trainer_callback import ExportableState
from trl.models.utils import prepare_deepspeed
from trl.trainer.utils import disable_dropout_in_model

from llm_rl.algorithms.ppo import core
from llm_rl.algorithms.ppo.forward import PolicyAndCritic, chunked_logprobs, chunked_values, model_inputs
from llm_rl.algorithms.ppo.rollout import (
    AdvantageSettings,
    Rollout,
    estimate_advantages,
    join_sequences,
    penalise_missing_stop,
)
from llm_rl.algorithms.ppo.settings import PPOSettings
from llm_rl.data.prompts import ROW_INDEX
from llm_rl.generation.generators import build_generator
from llm_rl.generation.sampling import Generator, SamplingSettings, left_padded
from llm_rl.generation.vllm_settings import EngineSettings, VLLMInputs
from llm_rl.models.completions import ends_with_stop, response_lengths, trimmed
from llm_rl.rewards.scoring import RewardAdapter, reward_metrics
from llm_rl.run_folder import VALUE_MODEL_DIR
from llm_rl.training.args import checkpointing_field
from llm_rl.training.checkpoint_files import load_weights
from llm_rl.training.checkpoints import StagedCheckpoints
from llm_rl.training.evaluation import EvaluateAtStart, HeldOutReward
from llm_rl.training.trainer_internals import (
    load_optimizer_scheduler_and_scaler,
    load_rng_state,
    save_checkpoint,
)

POLICY_GROUP, VALUE_GROUP = "policy", "value"


class PPOTrainer(StagedCheckpoints, Trainer):
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
        estimator; `reference` is None with LoRA (the policy with its adapter off stands in); `saved_tokenizer` (default: `tokenizer`) goes into saved folders;
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
        self.generator: Generator = build_generator(
            lambda: self.model_wrapped,
            self.accelerator,
            sampling,
            chunk_size=self.generation_chunk_size,
            gather_zero3=settings.ds3_gather_for_generation,
            vllm=None if vllm_engine is None else VLLMInputs(self.model.policy, tokenizer, vllm_engine),
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

    def create_optimizer(self, model: torch.nn.Module | None = None) -> torch.optim.Optimizer:
        """One optimizer, the policy's parameters and the critic's in groups of their own, each model at its
        own learning rate; biases and norm weights without weight decay, as `Trainer` has them."""
        if self.optimizer is None:
            optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, self.model)
            optimizer_kwargs.pop("lr", None)
            critic_lr = self.settings.critic_learning_rate
            decayed = set(self.get_decay_parameter_names(self.model))
            groups = []
            rates = [(POLICY_GROUP, self.args.learning_rate)]
            if self.has_critic:
                rates.append((VALUE_GROUP, self.args.learning_rate if critic_lr is None else critic_lr))
            for name, learning_rate in rates:
                prefix = "policy" if name == POLICY_GROUP else "critic"
                parameters = [(n, p) for n, p in self.model.named_parameters() if n.startswith(f"{prefix}.")]
                for decay in (True, False):
                    own = [p for n, p in parameters if p.requires_grad and (n in decayed) == decay]
                    if own:
                        weight_decay = self.args.weight_decay if decay else 0.0
                        groups.append(
                            {"name": name, "params": own, "lr": learning_rate, "weight_decay": weight_decay}
                        )
            self.optimizer = optimizer_cls(groups, **optimizer_kwargs)
        return self.optimizer

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
        return self.state.global_step < self.settings.critic_warmup_steps

    def freeze_policy(self, frozen: bool) -> None:
        """Critic warm-up: a learning rate of 0 for the policy groups (the scheduler restores it each update).

        The loss gives the policy no gradient then either (`micro_batch_loss`), so nothing moves it, not
        even weight decay, and a joint clipping norm (DeepSpeed's) is the critic's alone.
        """
        if frozen:
            for group in self.optimizer.param_groups:
                if group.get("name") == POLICY_GROUP:
                    group["lr"] = 0.0

    # ------------------------------------------------------------------------------------------------
    # Rollout: generate, score, evaluate, estimate advantages
    # ------------------------------------------------------------------------------------------------

    @property
    def stop_token_ids(self) -> list[int]:
        return self.sampling.stop_token_ids

    @contextmanager
    def reference_model(self) -> Iterator[torch.nn.Module]:
        """The reference model; with LoRA, the policy with its adapter off (no second copy)."""
        if self.reference is not None:
            yield self.reference
        else:
            with self.model.policy.disable_adapter():
                yield self.model.policy

    def advantage_settings(self) -> AdvantageSettings:
        settings = self.settings
        return AdvantageSettings(
            kl_coef=settings.kl_coef,
            kl_estimator=settings.kl_estimator,
            gamma=settings.gamma,
            lam=settings.lam,
            whiten_rewards=settings.whiten_rewards,
            whiten_advantages=self.whiten_advantages,
            estimator=settings.advantage_estimator,
            group_size=settings.group_size,
            all_reduce=lambda tensor: self.accelerator.reduce(tensor, reduction="sum"),
        )

    @torch.no_grad()
    def rollout(self, batch: dict[str, torch.Tensor]) -> Rollout:
        """Generate for one prompt batch (each prompt `group_size` times), score, evaluate and estimate
        advantages."""
        device = self.accelerator.device
        batch = {
            key: value.repeat_interleave(self.settings.group_size, dim=0) for key, value in batch.items()
        }
        prompt_ids = batch["input_ids"].to(device)
        prompt_mask = batch["attention_mask"].to(device).bool()
        with self.accelerator.autocast():
            completion_ids = self.generator.generate(prompt_ids, prompt_mask).completion_ids
        lengths = response_lengths(completion_ids, self.stop_token_ids)
        scores, per_function = self.score(batch[ROW_INDEX], completion_ids)
        scores = penalise_missing_stop(
            scores, completion_ids, lengths, self.stop_token_ids, self.settings.missing_eos_penalty
        )
        ids, attention = join_sequences(prompt_ids, prompt_mask, completion_ids, lengths)
        logprobs, ref_logprobs, values = self.evaluate_responses(ids, attention, completion_ids.shape[1])
        rollout = Rollout(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            completion_ids=completion_ids,
            lengths=lengths,
            row_indices=batch[ROW_INDEX].to(device),
            logprobs=logprobs,
            ref_logprobs=ref_logprobs,
            values=values,
            scores=scores,
            per_function=per_function,
        )
        return estimate_advantages(rollout, self.advantage_settings())

    def score(
        self, row_indices: torch.Tensor, completion_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(scores, per-function values) of each completion, its tokens up to and with its stop token."""
        scores, values = self.rewards(row_indices.tolist(), trimmed(completion_ids, self.stop_token_ids))
        return scores.to(completion_ids.device), values.to(completion_ids.device)

    def evaluate_responses(
        self, ids: torch.Tensor, attention: torch.Tensor, width: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Log-probs of the last `width` tokens under the policy and the reference, and the critic's values
        (None without a critic)."""
        common = {
            "width": width,
            "pad_token_id": self.sampling.pad_token_id,
            "chunk_size": self.forward_chunk_size,
        }
        temperature = self.sampling.temperature
        with self.accelerator.autocast():
            logprobs = chunked_logprobs(self.model.policy, ids, attention, temperature=temperature, **common)
            with self.reference_model() as reference:
                ref_logprobs = chunked_logprobs(reference, ids, attention, temperature=temperature, **common)
            values = chunked_values(self.model.critic, ids, attention, **common) if self.has_critic else None
        return logprobs.float(), ref_logprobs.float(), None if values is None else values.float()

    # ------------------------------------------------------------------------------------------------
    # Optimisation
    # ------------------------------------------------------------------------------------------------

    def epoch_orders(self) -> list[torch.Tensor]:
        """One shuffled order of the rollout per PPO epoch, fixed by the seed and the update number (so a
        resumed run shuffles as the straight one did)."""
        generator = torch.Generator().manual_seed(self.args.seed * 1_000_003 + self.state.global_step)
        return [
            torch.randperm(self.local_batch_size, generator=generator)
            for _ in range(self.settings.num_ppo_epochs)
        ]

    def optimise(self, rollout: Rollout) -> dict[str, torch.Tensor]:
        """`num_ppo_epochs` passes over the rollout; returns each statistic's mean over the update."""
        return self.train_on(rollout, self.epoch_orders())

    def train_on(self, rollout: Rollout, orders: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """One pass per order: its mini-batches in turn, one optimizer step each; the mean statistics."""
        micro_size = self.args.per_device_train_batch_size
        mini_size = micro_size * self.args.gradient_accumulation_steps
        stats: dict[str, list[torch.Tensor]] = {}
        for order in orders:
            for start in range(0, len(order), mini_size):
                mini = order[start : start + mini_size]
                micro_batches = [mini[i : i + micro_size] for i in range(0, len(mini), micro_size)]
                for key, value in self.optimizer_step(rollout, micro_batches).items():
                    stats.setdefault(key, []).append(value)
        return {key: torch.stack(values).mean() for key, values in stats.items()}

    def optimizer_step(self, rollout: Rollout, micro_batches: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """Accumulate the loss's gradients over the micro-batches, clip, step; each micro-batch's statistics
        and the gradient norms (as `Trainer` accumulates: no gradient sync before the last micro-batch)."""
        accelerator = self.accelerator
        stats: dict[str, list[torch.Tensor]] = {}
        for index, micro in enumerate(micro_batches):
            last = index == len(micro_batches) - 1
            accelerator.sync_gradients = last
            syncing = last or self.is_deepspeed_enabled
            with nullcontext() if syncing else accelerator.no_sync(self.model_wrapped):
                loss, micro_stats = self.micro_batch_loss(
                    rollout.select(micro.to(rollout.completion_ids.device))
                )
                backward_kwargs = {"scale_wrt_gas": False} if self.is_deepspeed_enabled else {}
                accelerator.backward(loss / len(micro_batches), **backward_kwargs)
            for key, value in micro_stats.items():
                stats.setdefault(key, []).append(value.detach().float())
        if self.warming_up and not self.is_deepspeed_enabled:
            # No gradient: the optimizer leaves the policy alone, its moments and step count too.
            self.model.policy.zero_grad(set_to_none=True)
        norms = self.clip_gradients()
        self.optimizer.step()
        self.optimizer.zero_grad()
        if self.is_deepspeed_enabled:
            norms = self.deepspeed_grad_norm()
        return {**{key: torch.stack(values).mean() for key, values in stats.items()}, **norms}

    def micro_batch_loss(self, batch: Rollout) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The clipped policy loss + `vf_coef` x the clipped value loss (with a critic) - `entropy_coef` x the
        entropy, of one micro-batch, with its statistics under TRL's PPO names."""
        settings = self.settings
        ids, attention = batch.sequences()
        logprobs, entropy, values = self.model_wrapped(
            **model_inputs(ids, attention, self.sampling.pad_token_id),
            tokens=batch.completion_ids,
            temperature=self.sampling.temperature,
            entropy_requires_grad=settings.entropy_coef > 0,
        )
        response_mask = batch.response_mask
        policy = core.clipped_policy_loss(
            logprobs, batch.logprobs, batch.advantages, response_mask, settings.cliprange
        )
        mean_entropy = core.masked_mean(entropy, response_mask)
        policy_loss = (
            policy.loss - settings.entropy_coef * mean_entropy if settings.entropy_coef > 0 else policy.loss
        )
        stats = {
            "loss/policy_avg": policy.loss.detach(),
            "policy/clipfrac_avg": policy.clipfrac,
            "policy/approxkl_avg": policy.approxkl,
            "policy/entropy_avg": mean_entropy.detach(),
            "val/ratio": policy.ratio,
        }
        if values is None:
            return policy_loss, stats
        value_loss, value_clipfrac = core.clipped_value_loss(
            values.float(), batch.values, batch.returns, batch.value_mask, settings.cliprange_value
        )
        stats.update({"loss/value_avg": value_loss.detach(), "val/clipfrac_avg": value_clipfrac})
        # During the critic's warm-up the policy's term weighs 0: its gradients are 0 (every parameter still
        # takes part, as DDP requires) and are dropped before the step.
        return (0.0 if self.warming_up else 1.0) * policy_loss + settings.vf_coef * value_loss, stats

    def clip_gradients(self) -> dict[str, torch.Tensor]:
        """Clip the policy's and the critic's gradients apart; both norms before clipping.

        Under DeepSpeed the engine clips inside its own step, over all its gradients at once, to
        `gradient_clipping` (set from `training.max_grad_norm`); its joint norm is read after the step.
        """
        if self.is_deepspeed_enabled:
            return {}
        if self._clip_groups is None:
            self._clip_groups = {"grad_norm": trainable(self.model.policy)}
            if self.has_critic:
                self._clip_groups["value/grad_norm"] = trainable(self.model.critic)
        self.accelerator.unscale_gradients()
        limit = self.args.max_grad_norm or math.inf
        norms = clip_each_group(list(self._clip_groups.values()), limit)
        return dict(zip(self._clip_groups, norms, strict=True))

    def deepspeed_grad_norm(self) -> dict[str, torch.Tensor]:
        """The engine's joint gradient norm of its last step, when it has one."""
        norm = self.model_wrapped.get_global_grad_norm()
        return {} if norm is None else {"grad_norm": torch.as_tensor(float(norm), dtype=torch.float32)}

    # ------------------------------------------------------------------------------------------------
    # Metrics
    # ------------------------------------------------------------------------------------------------

    @torch.no_grad()
    def update_metrics(
        self, rollout: Rollout, stats: dict[str, torch.Tensor], warming_up: bool
    ) -> dict[str, Any]:
        """One update's metrics, under the names of TRL's PPOTrainer (renamed to the unified ones by
        `llm_rl.algorithms.ppo.algorithm.METRIC_NAMES`), averaged over processes in two collectives, plus the held-out reward
        on evaluation updates."""
        response_mask = rollout.response_mask
        ended = ends_with_stop(rollout.completion_ids, rollout.lengths, self.stop_token_ids)
        averaged = {
            "objective/kl": rollout.kl.sum(1).mean(),
            "objective/entropy": (-rollout.logprobs * response_mask).sum(1).mean(),
            "objective/non_score_reward": rollout.kl_penalty.sum(1).mean(),
            **self.critic_metrics(rollout),
            "completions/mean_length": (rollout.lengths + 1).float().mean(),
            "completions/clipped_ratio": (~ended).float().mean(),
            **stats,
        }
        skipped = self.rewards.take_skipped()
        summed = {
            "val/num_eos_tokens": ended.sum(),
            **{f"rewards/{name}/skipped": torch.tensor(float(count)) for name, count in skipped.items()},
        }
        device = self.accelerator.device
        local = torch.stack(
            [value.to(device, torch.float32) for value in [*averaged.values(), *summed.values()]]
        )
        ranks = self.accelerator.gather(local[None]).reshape(-1, len(local))
        metrics: dict[str, Any] = {
            **dict(zip(averaged, ranks[:, : len(averaged)].mean(0).tolist(), strict=True)),
            **dict(zip(summed, ranks[:, len(averaged) :].sum(0).tolist(), strict=True)),
        }
        samples = self.accelerator.gather_for_metrics(
            torch.cat([rollout.scores[:, None], rollout.per_function], 1)
        )
        scores = samples[:, 0]
        metrics["objective/scores"] = scores.mean().item()
        metrics["objective/scores_std"] = scores.std().item() if scores.numel() > 1 else 0.0
        metrics["objective/rlhf_reward"] = metrics["objective/non_score_reward"] + metrics["objective/scores"]
        metrics.update(group_metrics(scores, self.settings.group_size))
        metrics.update(reward_metrics(samples[:, 1:], self.rewards.rewards.names))
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

    def critic_metrics(self, rollout: Rollout) -> dict[str, torch.Tensor]:
        """How well the critic's values explain the returns; nothing without a critic."""
        if rollout.values is None:
            return {}
        variance = core.explained_variance(rollout.values, rollout.returns, rollout.value_mask)
        return {"val/explained_variance": variance}

    # ------------------------------------------------------------------------------------------------
    # Saving and resuming
    # ------------------------------------------------------------------------------------------------

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


class PromptCollator:
    """Tokenized prompts into a batch: left-padded ids and mask (as every generator takes them), and the
    rows' indices (the way back to their dataset columns for the reward functions)."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        ids, mask = left_padded([row["input_ids"] for row in rows], self.pad_token_id)
        return {
            "input_ids": ids,
            "attention_mask": mask,
            ROW_INDEX: torch.tensor([row[ROW_INDEX] for row in rows]),
        }


def group_metrics(scores: torch.Tensor, group_size: int) -> dict[str, float]:
    """The mean spread of scores within a prompt's group, and the share of groups whose completions all
    scored alike (they carry no advantage under a group baseline), as GRPO logs them; none without groups.
    `scores` is the gathered batch: each process holds whole groups, so groups stay consecutive."""
    if group_size < 2:
        return {}
    spread = scores.view(-1, group_size).std(dim=1, unbiased=False)
    return {
        "reward/group_std": spread.mean().item(),
        "frac_reward_zero_std": torch.isclose(spread, torch.zeros_like(spread)).float().mean().item(),
    }


def trainable(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters of a module that the optimizer updates."""
    return [parameter for parameter in module.parameters() if parameter.requires_grad]


@torch.no_grad()
def clip_each_group(groups: list[list[torch.nn.Parameter]], limit: float) -> list[torch.Tensor]:
    """Scale each group's gradients down to `limit` where their joint L2 norm exceeds it; returns each
    group's norm before clipping.

    `torch.nn.utils.clip_grad_norm_` does the same per call, but it also multiplies every gradient by
    min(1, limit / norm) when that is 1, and sorts the tensors by device and dtype each time. Here one
    `_foreach_norm` (what it uses inside) measures every tensor of every group, and only the groups that
    clip are multiplied: on a small model these per-tensor passes cost more than the arithmetic. Deciding
    reads each norm on the host, one wait for the device an optimizer step, small beside a step's work.
    """
    grads = [[parameter.grad for parameter in group if parameter.grad is not None] for group in groups]
    every = [grad for group in grads for grad in group]
    tensor_norms = torch._foreach_norm(every) if every else []
    norms, start = [], 0
    for group in grads:
        own = tensor_norms[start : start + len(group)]
        start += len(group)
        norm = torch.linalg.vector_norm(torch.stack(own).float()) if own else torch.tensor(0.0)
        if norm > limit:
            torch._foreach_mul_(group, limit / (norm.item() + 1e-6))
        norms.append(norm)
    return norms
