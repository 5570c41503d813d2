"""TRL's PPOTrainer with the controls it lacks (DESIGN.md), as our own update loop on TRL's pieces.

Generation, the KL-penalised per-token rewards, GAE and the clipped policy and value losses follow
`PPOTrainer.train` of trl 1.12.0 step by step. What differs, and why:

- **rewards** come from the recipe's reward functions through `RewardAdapter`, not a reward model;
- **two parameter groups**, so the critic has its own learning rate (`ppo.critic_learning_rate`);
- **gradient clipping** before every optimizer step, policy and critic apart, each to
  `training.max_grad_norm`: the value loss has the scale of the rewards and its gradient is often far
  larger than the policy's, so one joint norm would let the critic shrink the policy's steps. Both
  norms before clipping are logged (`grad_norm`, `value/grad_norm`). Under DeepSpeed the engine clips
  both together, as it owns the step (`clip_gradients`);
- **critic warm-up**: for the first `ppo.critic_warmup_steps` updates the policy's learning rate is 0,
  so only the critic learns (its targets come from the policy's rollouts, which stay fixed);
- the loop **stops** when a callback sets `should_training_stop` (early stopping);
- **resume**: `train(resume_from_checkpoint=...)` restores both models, the optimizer, the scheduler,
  the RNG states, the counters and the position in the prompt stream;
- the **critic is saved** with every checkpoint and with the final model, in `value_model/`;
- more **metrics**: reward std, per-reward means, explained variance, grad norms, completion length.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader
from transformers import GenerationConfig, PreTrainedModel
from transformers.integrations.deepspeed import deepspeed_load_checkpoint
from transformers.trainer import TRAINER_STATE_NAME, TRAINING_ARGS_NAME
from trl.models.utils import unwrap_model_for_generation
from trl.trainer.utils import selective_log_softmax

from llm_rl.checkpoints import StagedCheckpoints
from llm_rl.evaluation import HeldOutReward
from llm_rl.ppo_rewards import RewardAdapter, reward_metrics
from llm_rl.trl_ppo import (
    INVALID_LOGPROB,
    OnlineTrainerState,
    PPOTrainer,
    batch_generation,
    deepspeed_leaves_alone,
    first_true_indices,
    forward,
    get_reward,
    masked_mean,
    masked_var,
    masked_whiten,
    truncate_response,
)
from llm_rl.value_model import VALUE_MODEL_DIR

POLICY_GROUP, VALUE_GROUP = "policy", "value"


class UnifiedPPOTrainer(StagedCheckpoints, PPOTrainer):
    """TRL's PPOTrainer driven by our loop (module docstring). `reward_model` must be a `RewardAdapter`."""

    def __init__(
        self,
        *args: Any,
        critic_learning_rate: float | None = None,
        critic_warmup_steps: int = 0,
        entropy_coef: float = 0.0,
        whiten_advantages: bool = True,
        sampling: dict[str, Any] | None = None,
        held_out: HeldOutReward | None = None,
        **kwargs: Any,
    ) -> None:
        """TRL's arguments, plus the critic's learning rate and warm-up, the entropy bonus, whether GAE
        advantages are whitened, `sampling` (top_p, top_k) and the held-out reward evaluator."""
        self.held_out = held_out
        self._unwrapped: tuple[Any, Any] | None = None
        self._clip_groups: dict[str, list[torch.nn.Parameter]] | None = None
        self.critic_learning_rate = critic_learning_rate
        self.critic_warmup_steps = critic_warmup_steps
        self.entropy_coef = entropy_coef
        self.whiten_advantages = whiten_advantages
        with deepspeed_leaves_alone(RewardAdapter):
            super().__init__(*args, **kwargs)
        # TRL's PPOTrainer never runs Trainer.__init__; Trainer's checkpoint loaders read these.
        self.is_fsdp_xla_enabled = self.is_fsdp_xla_v1_enabled = self.is_fsdp_xla_v2_enabled = False
        self.is_distributed_loading_by_transformers = False
        if not isinstance(self.reward_model, RewardAdapter):
            raise TypeError("UnifiedPPOTrainer scores rollouts with a RewardAdapter")
        self.dataloader = self.seeded_dataloader()
        self.generation_kwargs = {
            "max_new_tokens": self.args.response_length,
            "temperature": self.args.temperature + 1e-7,
            "top_k": 0,
            "top_p": 1.0,
            "do_sample": True,
            **(sampling or {}),
        }

    # ------------------------------------------------------------------------------------------------
    # Set-up
    # ------------------------------------------------------------------------------------------------

    def create_optimizer(self, model=None) -> torch.optim.Optimizer:
        """One optimizer with a policy group and a critic group, each with its own learning rate."""
        if self.optimizer is None:
            wrapper = self.model if model is None else model
            optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, wrapper)
            critic_lr = (
                self.critic_learning_rate
                if self.critic_learning_rate is not None
                else self.args.learning_rate
            )
            groups = [
                {"name": POLICY_GROUP, "params": trainable(wrapper.policy), "lr": self.args.learning_rate},
                {"name": VALUE_GROUP, "params": trainable(wrapper.value_model), "lr": critic_lr},
            ]
            for group in groups:
                group["weight_decay"] = self.args.weight_decay
            optimizer_kwargs.pop("lr", None)
            self.optimizer = optimizer_cls(groups, **optimizer_kwargs)
        return self.optimizer

    def seeded_dataloader(self) -> DataLoader:
        """TRL's shuffled prompt loader, with its own generator so that a resume can replay its order."""
        generator = torch.Generator().manual_seed(self.args.seed)
        loader = DataLoader(
            self.train_dataset,
            batch_size=self.local_dataloader_batch_size,
            shuffle=True,
            collate_fn=self.data_collator,
            drop_last=True,
            generator=generator,
        )
        return self.accelerator.prepare(loader)

    def prompt_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        """Prompt batches forever, epoch after epoch."""
        while True:
            yield from self.dataloader

    # ------------------------------------------------------------------------------------------------
    # The loop
    # ------------------------------------------------------------------------------------------------

    def train(self, resume_from_checkpoint: str | None = None) -> None:
        """Run PPO updates until the budget is spent or a callback stops training."""
        args = self.args
        self.init_state()
        if self.is_deepspeed_enabled:
            # Trainer's save and load methods find the DeepSpeed engine under these names.
            self.deepspeed = self.model_wrapped = self.model
        batches = self.prompt_batches()
        if resume_from_checkpoint is not None:
            self.resume(resume_from_checkpoint, batches)
        self.control = self.callback_handler.on_train_begin(args, self.state, self.control)
        self.model.train()
        started = time.time()
        while self.state.global_step < self.state.max_steps and not self.control.should_training_stop:
            self.control = self.callback_handler.on_step_begin(args, self.state, self.control)
            warming_up = self.state.global_step < self.critic_warmup_steps
            self.freeze_policy(warming_up)
            rollout = self.rollout(next(batches))
            stats = self.optimise(rollout)
            self.state.global_step += 1
            self.state.episode += args.batch_size
            self.state.epoch = self.state.episode / self.train_dataset_len
            if self.state.global_step % self.state.logging_steps == 0:
                metrics = self.update_metrics(rollout, stats, warming_up)
                metrics["eps"] = int(self.state.episode / max(time.time() - started, 1e-9))
                if self.held_out is not None and self.held_out.due(self.state.global_step):
                    metrics.update(self.held_out(self.model, self.accelerator, policy_of=lambda m: m.policy))
                self.log(metrics)
            self.lr_scheduler.step()
            self.control = self.callback_handler.on_step_end(args, self.state, self.control)
            if self.control.should_save:
                self._save_checkpoint(self.model, trial=None)
                self.control = self.callback_handler.on_save(args, self.state, self.control)
            del rollout
        self.control = self.callback_handler.on_train_end(args, self.state, self.control)

    def init_state(self) -> None:
        """Counters and cadences for a fresh run (a resume then overwrites the counters)."""
        args = self.args
        self.state = OnlineTrainerState(
            is_local_process_zero=self.is_local_process_zero(),
            is_world_process_zero=self.is_world_process_zero(),
            stateful_callbacks=self.state.stateful_callbacks,
        )
        self.state.max_steps = args.num_total_batches
        self.state.num_train_epochs = args.total_episodes / self.train_dataset_len
        self.state.logging_steps = max(1, int(args.logging_steps))
        self.state.save_steps = int(args.save_steps)
        self.state.eval_steps = int(args.eval_steps or args.logging_steps)

    def unwrapped_model(self) -> Any:
        """The policy-and-value wrapper without DDP or DeepSpeed around it, looked up once per wrapped
        model: accelerate's `unwrap_model` takes milliseconds, several times an update."""
        if self._unwrapped is None or self._unwrapped[0] is not self.model:
            self._unwrapped = (self.model, self.accelerator.unwrap_model(self.model))
        return self._unwrapped[1]

    @contextmanager
    def null_ref_context(self):
        """The policy with its LoRA adapter off: the reference model when LoRA is on (no second copy).

        TRL's version reads `self.model.policy`, which a DDP wrapper does not have; this one unwraps first.
        """
        policy = self.unwrapped_model().policy
        with policy.disable_adapter() if self.is_peft_model else nullcontext():
            yield

    def freeze_policy(self, frozen: bool) -> None:
        """Critic warm-up: a learning rate of 0 for the policy group (the scheduler restores it each update)."""
        if not frozen:
            return
        for group in self.optimizer.param_groups:
            if group.get("name") == POLICY_GROUP:
                group["lr"] = 0.0

    # ------------------------------------------------------------------------------------------------
    # Rollout: generate, score, and turn scores into per-token advantages (TRL's steps 1-6)
    # ------------------------------------------------------------------------------------------------

    @torch.no_grad()
    def rollout(self, data: dict[str, torch.Tensor]) -> dict[str, Any]:
        """Generate responses for one prompt batch and compute their rewards, values and advantages."""
        args, accelerator = self.args, self.accelerator
        pad = self.processing_class.pad_token_id
        queries = data["input_ids"].to(accelerator.device)
        row_indices = data["row_index"]
        context_length = queries.shape[1]
        with unwrap_model_for_generation(
            self.model,
            accelerator,
            gather_deepspeed3_params=args.ds3_gather_for_generation,
            generation_kwargs=self.generation_kwargs,
        ) as unwrapped:
            query_responses, all_logits = batch_generation(
                unwrapped.policy,
                queries,
                args.local_rollout_forward_batch_size,
                pad,
                GenerationConfig(**self.generation_kwargs),
            )
        parts: dict[str, list[torch.Tensor]] = {
            key: []
            for key in (
                "responses",
                "post",
                "logprobs",
                "ref_logprobs",
                "lengths",
                "scores",
                "values",
                "per_fn",
            )
        }
        value_model = self.unwrapped_model().value_model
        step = args.local_rollout_forward_batch_size
        for start in range(0, queries.shape[0], step):
            query_response = query_responses[start : start + step]
            response = query_response[:, context_length:]
            logprob = selective_log_softmax(all_logits[start : start + step], response)
            ref_logprob = self.reference_logprobs(query_response, response, context_length)
            post = response
            if self.stop_token_id is not None:
                post = truncate_response(self.stop_token_id, pad, response)
            full_value, _, _ = get_reward(value_model, query_response, pad, context_length)
            score, per_fn = self.reward_model(row_indices[start : start + step], post)
            parts["responses"].append(response)
            parts["post"].append(post)
            parts["logprobs"].append(logprob)
            parts["ref_logprobs"].append(ref_logprob)
            parts["lengths"].append(first_true_indices(post == pad) - 1)
            parts["scores"].append(score.to(logprob.dtype))
            parts["values"].append(full_value[:, context_length - 1 : -1].squeeze(-1))
            parts["per_fn"].append(per_fn)
        del all_logits
        batch = {key: torch.cat(value, 0) for key, value in parts.items()}
        batch["query_responses"] = query_responses
        batch["context_length"] = context_length
        return self.advantages(batch)

    def reference_logprobs(
        self, query_response: torch.Tensor, response: torch.Tensor, context_length: int
    ) -> torch.Tensor:
        """Log-probabilities of the response under the reference model (the adapter-free policy with LoRA)."""
        pad = self.processing_class.pad_token_id
        if self.ref_model is None:
            with self.null_ref_context():
                output = forward(self.unwrapped_model().policy, query_response, pad)
        else:
            output = forward(self.ref_model, query_response, pad)
        logits = output.logits[:, context_length - 1 : -1] / (self.args.temperature + 1e-7)
        return selective_log_softmax(logits, response)

    def advantages(self, batch: dict[str, Any]) -> dict[str, Any]:
        """KL-penalised per-token rewards, then GAE advantages and returns (TRL's steps 3-6)."""
        args = self.args
        responses, lengths, scores = batch["responses"], batch["lengths"], batch["scores"]
        contains_eos = torch.any(batch["post"] == self.processing_class.eos_token_id, dim=-1)
        if args.missing_eos_penalty is not None:
            scores[~contains_eos] -= args.missing_eos_penalty
        positions = torch.arange(responses.shape[1], device=responses.device).repeat(responses.shape[0], 1)
        padding_mask = positions > lengths.unsqueeze(1)
        padding_mask_p1 = positions > (lengths + 1).unsqueeze(1)
        logprobs = torch.masked_fill(batch["logprobs"], padding_mask, INVALID_LOGPROB)
        ref_logprobs = torch.masked_fill(batch["ref_logprobs"], padding_mask, INVALID_LOGPROB)
        values = torch.masked_fill(batch["values"], padding_mask_p1, 0)

        log_ratio = ref_logprobs - logprobs
        kl = -log_ratio if args.kl_estimator == "k1" else (log_ratio.exp() - 1) - log_ratio
        non_score_reward = -args.kl_coef * kl
        rewards = non_score_reward.clone()
        rows = torch.arange(rewards.size(0), device=rewards.device)
        ends = torch.where(lengths + 1 < rewards.size(1), lengths + 1, lengths)
        rewards[rows, ends] += scores
        if args.whiten_rewards:
            rewards = torch.masked_fill(
                masked_whiten(rewards, ~padding_mask_p1, shift_mean=False), padding_mask_p1, 0
            )

        last_gae = 0
        reversed_advantages = []
        length = responses.shape[1]
        for t in reversed(range(length)):
            next_values = values[:, t + 1] if t < length - 1 else 0.0
            delta = rewards[:, t] + args.gamma * next_values - values[:, t]
            last_gae = delta + args.gamma * args.lam * last_gae
            reversed_advantages.append(last_gae)
        advantages = torch.stack(reversed_advantages[::-1], dim=1)
        returns = advantages + values
        if self.whiten_advantages:
            advantages = masked_whiten(advantages, ~padding_mask)
        advantages = torch.masked_fill(advantages, padding_mask, 0)
        batch.update(
            logprobs=logprobs,
            values=values,
            scores=scores,
            kl=kl,
            non_score_reward=non_score_reward,
            advantages=advantages,
            returns=returns,
            padding_mask=padding_mask,
            padding_mask_p1=padding_mask_p1,
        )
        return batch

    # ------------------------------------------------------------------------------------------------
    # Optimisation: PPO epochs over mini-batches, with clipping (TRL's inner loop)
    # ------------------------------------------------------------------------------------------------

    def optimise(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """`num_ppo_epochs` passes over the rollout in shuffled mini-batches; returns the mean statistics."""
        args, accelerator = self.args, self.accelerator
        stats: dict[str, list[torch.Tensor]] = {}
        for _ in range(args.num_ppo_epochs):
            order = np.random.permutation(args.local_batch_size)
            for mini_start in range(0, args.local_batch_size, args.local_mini_batch_size):
                mini = order[mini_start : mini_start + args.local_mini_batch_size]
                for micro_start in range(0, args.local_mini_batch_size, args.per_device_train_batch_size):
                    micro = mini[micro_start : micro_start + args.per_device_train_batch_size]
                    with accelerator.accumulate(self.model):
                        loss, micro_stats = self.micro_batch_loss(batch, micro)
                        accelerator.backward(loss)
                        if accelerator.sync_gradients:
                            micro_stats.update(self.clip_gradients())
                        self.optimizer.step()
                        self.optimizer.zero_grad()
                    for key, value in micro_stats.items():
                        stats.setdefault(key, []).append(value.detach().float())
        return {key: torch.stack(values).mean() for key, values in stats.items()}

    def micro_batch_loss(
        self, batch: dict[str, Any], index: np.ndarray
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The clipped policy loss plus `vf_coef` x the clipped value loss of one micro-batch."""
        args = self.args
        context_length = batch["context_length"]
        padding_mask = batch["padding_mask"][index]
        padding_mask_p1 = batch["padding_mask_p1"][index]
        advantages, returns = batch["advantages"][index], batch["returns"][index]
        old_values, old_logprobs = batch["values"][index], batch["logprobs"][index]

        output, value_logits = forward(
            self.model, batch["query_responses"][index], self.processing_class.pad_token_id
        )
        logits = output.logits[:, context_length - 1 : -1] / (args.temperature + 1e-7)
        new_logprobs = torch.masked_fill(
            selective_log_softmax(logits, batch["responses"][index]), padding_mask, INVALID_LOGPROB
        )
        values = torch.masked_fill(value_logits[:, context_length - 1 : -1].squeeze(-1), padding_mask_p1, 0)
        clipped_values = torch.clamp(
            values, old_values - args.cliprange_value, old_values + args.cliprange_value
        )
        value_losses = torch.square(values - returns)
        clipped_value_losses = torch.square(clipped_values - returns)
        value_loss = 0.5 * masked_mean(torch.max(value_losses, clipped_value_losses), ~padding_mask_p1)

        log_ratio = new_logprobs - old_logprobs
        ratio = torch.exp(log_ratio)
        policy_losses = -advantages * ratio
        clipped_policy_losses = -advantages * torch.clamp(ratio, 1.0 - args.cliprange, 1.0 + args.cliprange)
        policy_loss = masked_mean(torch.max(policy_losses, clipped_policy_losses), ~padding_mask)
        loss = policy_loss + args.vf_coef * value_loss
        with torch.set_grad_enabled(self.entropy_coef > 0 and torch.is_grad_enabled()):
            probabilities = torch.nn.functional.softmax(logits, dim=-1)
            entropy = torch.logsumexp(logits, dim=-1) - torch.sum(probabilities * logits, dim=-1)
        if self.entropy_coef > 0:
            loss = loss - self.entropy_coef * masked_mean(entropy, ~padding_mask)
        entropy = entropy.detach()
        with torch.no_grad():
            stats = {
                "policy/approxkl_avg": 0.5 * (log_ratio**2).mean(),
                "policy/clipfrac_avg": masked_mean(
                    (clipped_policy_losses > policy_losses).float(), ~padding_mask
                ),
                "loss/policy_avg": policy_loss,
                "loss/value_avg": value_loss,
                "val/clipfrac_avg": masked_mean(
                    (clipped_value_losses > value_losses).float(), ~padding_mask_p1
                ),
                "policy/entropy_avg": entropy.mean(),
                "val/ratio": ratio.mean(),
            }
        return loss, stats

    def clip_gradients(self) -> dict[str, torch.Tensor]:
        """Clip the policy's and the critic's gradients apart; returns both norms before clipping.

        Under DeepSpeed the engine clips inside its own step, over all its gradients at once (policy and
        critic together, to `gradient_clipping`, which `llm_rl.training_args` sets from
        `training.max_grad_norm`): only that joint norm exists, logged as `grad_norm`.
        """
        if self.is_deepspeed_enabled:
            norm = self.model.get_global_grad_norm()
            return {} if norm is None else {"grad_norm": torch.as_tensor(float(norm), dtype=torch.float32)}
        limit = self.args.max_grad_norm or math.inf
        if self._clip_groups is None:
            unwrapped = self.unwrapped_model()
            self._clip_groups = {
                "grad_norm": trainable(unwrapped.policy),
                "value/grad_norm": trainable(unwrapped.value_model),
            }
        self.accelerator.unscale_gradients()
        norms = clip_each_group(list(self._clip_groups.values()), limit)
        return dict(zip(self._clip_groups, norms, strict=True))

    # ------------------------------------------------------------------------------------------------
    # Metrics
    # ------------------------------------------------------------------------------------------------

    @torch.no_grad()
    def update_metrics(
        self, batch: dict[str, Any], stats: dict[str, torch.Tensor], warming_up: bool
    ) -> dict[str, Any]:
        """One update's metrics under TRL's PPO names (renamed to the unified ones by `llm_rl.ppo`).

        Each rank's scalars travel in one tensor and its per-sample scores in another: two collectives
        an update, where TRL's loop gathers every metric on its own.
        """
        mask = ~batch["padding_mask"]
        averaged = {
            "objective/kl": batch["kl"].sum(1).mean(),
            "objective/entropy": ((-batch["logprobs"]) * mask.float()).sum(1).mean(),
            "objective/non_score_reward": batch["non_score_reward"].sum(1).mean(),
            "val/explained_variance": explained_variance(
                batch["values"], batch["returns"], ~batch["padding_mask_p1"]
            ),
            "completions/mean_length": (batch["lengths"] + 1).float().mean(),
            **stats,
        }
        skipped = self.reward_model.take_skipped()
        summed = {
            "val/num_eos_tokens": (batch["responses"] == self.processing_class.eos_token_id).sum(),
            **{f"rewards/{name}/skipped": torch.tensor(float(count)) for name, count in skipped.items()},
        }
        device = self.accelerator.device
        local = torch.stack(
            [value.to(device, torch.float32) for value in [*averaged.values(), *summed.values()]]
        )
        ranks = self.accelerator.gather(local[None]).reshape(-1, len(local))
        means = ranks[:, : len(averaged)].mean(0).tolist()
        sums = ranks[:, len(averaged) :].sum(0).tolist()
        metrics: dict[str, Any] = {
            **dict(zip(averaged, means, strict=True)),
            **dict(zip(summed, sums, strict=True)),
        }
        samples = self.accelerator.gather_for_metrics(
            torch.cat([batch["scores"][:, None], batch["per_fn"]], 1)
        )
        scores = samples[:, 0]
        metrics["objective/scores"] = scores.mean().item()
        metrics["objective/scores_std"] = scores.std().item() if scores.numel() > 1 else 0.0
        metrics["objective/rlhf_reward"] = metrics["objective/non_score_reward"] + metrics["objective/scores"]
        metrics.update(reward_metrics(samples[:, 1:], self.reward_model.rewards.names))
        metrics.update(
            lr=self.lr_scheduler.get_last_lr()[0], critic_warmup=float(warming_up), episode=self.state.episode
        )
        return metrics

    # ------------------------------------------------------------------------------------------------
    # Saving and resuming
    # ------------------------------------------------------------------------------------------------

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """The policy as a `save_pretrained` folder (a LoRA adapter with LoRA), the critic in `value_model/`.

        One path for plain, DDP and DeepSpeed runs: accelerate hands over the full weights of both models
        (every rank takes part, as ZeRO-3 gathers shards), and the main process saves each model's part.
        TRL's version gives Trainer the bare policy where Trainer expects the DeepSpeed engine.
        """
        output_dir = output_dir or self.args.output_dir
        weights = self.accelerator.get_state_dict(self.model)
        if not self.args.should_save:
            return
        unwrapped = self.accelerator.unwrap_model(self.model)
        parts = (
            (unwrapped.policy, "policy.", output_dir),
            (unwrapped.value_model, "value_model.", os.path.join(output_dir, VALUE_MODEL_DIR)),
        )
        for module, prefix, folder in parts:
            own = {
                key.removeprefix(prefix): value for key, value in weights.items() if key.startswith(prefix)
            }
            module.save_pretrained(folder, state_dict=own, safe_serialization=True)
        self.processing_class.save_pretrained(output_dir)
        torch.save(self.args, os.path.join(output_dir, TRAINING_ARGS_NAME))

    def _save_checkpoint(self, model, trial) -> None:
        """Trainer's checkpoint (weights, optimizer, scheduler, RNG, state), without TRL's model card.

        TRL writes a model card first, reading `self.model.config`, which a DDP wrapper does not have.
        """
        super(PPOTrainer, self)._save_checkpoint(model, trial)

    def resume(self, checkpoint: str, batches: Iterator[dict[str, torch.Tensor]]) -> None:
        """Continue exactly from a checkpoint: weights, optimizer, scheduler, counters, data position, RNG."""
        if self.is_deepspeed_enabled:
            # The engine's own checkpoint holds both models and its (possibly sharded) optimizer.
            deepspeed_load_checkpoint(self.model, checkpoint)
        else:
            unwrapped = self.accelerator.unwrap_model(self.model)
            self._load_from_checkpoint(checkpoint, model=unwrapped.policy)
            self._load_from_checkpoint(os.path.join(checkpoint, VALUE_MODEL_DIR), model=unwrapped.value_model)
        self._load_optimizer_and_scheduler(checkpoint)
        saved = OnlineTrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME))
        self.state.global_step = saved.global_step
        self.state.episode = saved.episode
        self.state.epoch = saved.epoch
        self.state.log_history = saved.log_history
        for _ in range(saved.global_step):
            next(batches)
        self._load_rng_state(checkpoint)


def trainable(module: torch.nn.Module | PreTrainedModel) -> list[torch.nn.Parameter]:
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


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """1 - Var(returns - values) / Var(returns) over the valid tokens: 1 is a perfect critic, 0 a constant."""
    variance = masked_var(returns, mask, unbiased=False)
    if variance <= 0:
        return torch.tensor(float("nan"), device=values.device)
    return 1 - masked_var(returns - values, mask, unbiased=False) / variance
