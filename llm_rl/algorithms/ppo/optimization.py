"""PPO's optimisation (step 5 of an update): the optimizer groups, the passes over a rollout, the
micro-batch loss and gradient clipping. The policy and the critic sit in groups of their own, each at
its own learning rate, and are clipped apart (the value loss has the scale of the rewards, so one joint
norm would let the critic shrink the policy's steps)."""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Any

import torch

from llm_rl.algorithms.ppo import core
from llm_rl.algorithms.ppo.forward import model_inputs
from llm_rl.algorithms.ppo.rollout import Rollout

POLICY_GROUP, VALUE_GROUP = "policy", "value"


def parameter_groups(
    model: torch.nn.Module,
    learning_rates: dict[str, float],
    weight_decay: float,
    decayed: set[str],
) -> list[dict[str, Any]]:
    """Optimizer groups of `model`'s trainable parameters: for each of POLICY_GROUP (parameters under
    `policy.`) and VALUE_GROUP (`critic.`) in `learning_rates`, one group with weight decay (the names in
    `decayed`) and one without (biases and norm weights, as `Trainer` has them)."""
    prefixes = {POLICY_GROUP: "policy.", VALUE_GROUP: "critic."}
    groups = []
    for name, learning_rate in learning_rates.items():
        parameters = [(n, p) for n, p in model.named_parameters() if n.startswith(prefixes[name])]
        for decay in (True, False):
            own = [p for n, p in parameters if p.requires_grad and (n in decayed) == decay]
            if own:
                groups.append(
                    {
                        "name": name,
                        "params": own,
                        "lr": learning_rate,
                        "weight_decay": weight_decay if decay else 0.0,
                    }
                )
    return groups


def freeze_policy_groups(optimizer: torch.optim.Optimizer) -> None:
    """A learning rate of 0 for the policy's groups (the scheduler restores it at the next update)."""
    for group in optimizer.param_groups:
        if group.get("name") == POLICY_GROUP:
            group["lr"] = 0.0


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


class PPOOptimization:
    """Step 5 of a PPO update, mixed into `PPOTrainer`: `num_ppo_epochs` passes over a rollout in shuffled
    mini-batches, one optimizer step each, accumulated over micro-batches; the optimizer and its groups;
    the critic's warm-up. Reads the trainer's `args`, `settings`, `sampling`, `state`, `accelerator`,
    `model` (the unwrapped `PolicyAndCritic`), `model_wrapped` and `optimizer`."""

    def create_optimizer(self, model: torch.nn.Module | None = None) -> torch.optim.Optimizer:
        """One optimizer, the policy's parameters and the critic's in groups of their own, each model at its
        own learning rate; biases and norm weights without weight decay, as `Trainer` has them."""
        if self.optimizer is None:
            optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, self.model)
            optimizer_kwargs.pop("lr", None)
            rates = {POLICY_GROUP: self.args.learning_rate}
            if self.has_critic:
                critic_lr = self.settings.critic_learning_rate
                rates[VALUE_GROUP] = self.args.learning_rate if critic_lr is None else critic_lr
            decayed = set(self.get_decay_parameter_names(self.model))
            groups = parameter_groups(self.model, rates, self.args.weight_decay, decayed)
            self.optimizer = optimizer_cls(groups, **optimizer_kwargs)
        return self.optimizer

    def freeze_policy(self, frozen: bool) -> None:
        """Critic warm-up: a learning rate of 0 for the policy groups (the scheduler restores it each update).

        The loss gives the policy no gradient then either (`micro_batch_loss`), so nothing moves it, not
        even weight decay, and a joint clipping norm (DeepSpeed's) is the critic's alone.
        """
        if frozen:
            freeze_policy_groups(self.optimizer)

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
        value = None
        if values is not None:
            value = core.ValueTerms(
                values.float(),
                batch.values,
                batch.returns,
                batch.value_mask,
                settings.cliprange_value,
                settings.vf_coef,
            )
        # During the critic's warm-up the policy's term weighs 0: its gradients are 0 (every parameter still
        # takes part, as DDP requires) and are dropped before the step.
        return core.micro_batch_loss(
            logprobs,
            entropy,
            batch.logprobs,
            batch.advantages,
            batch.response_mask,
            settings.cliprange,
            settings.entropy_coef,
            value,
            policy_weight=0.0 if self.warming_up else 1.0,
        )

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
