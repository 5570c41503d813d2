"""GRPO: TRL's `GRPOTrainer` built from a recipe.

The shared sections map onto `GRPOConfig` through `training_args.shared_training_args`; the recipe's
`grpo:` section is passed through by TRL field name (already checked against the dataclass).
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedModel, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from llm_rl.algorithms.base import Components
from llm_rl.errors import RecipeError
from llm_rl.models.lora import peft_config
from llm_rl.schema import Recipe
from llm_rl.training.args import SampleCounter, sample_counter, shared_training_args, world_size
from llm_rl.training.checkpoints import StagedCheckpoints
from llm_rl.training.evaluation import HeldOutReward
from llm_rl.training.schedules import start_values

# TRL's GRPO log names -> the unified names of metrics.jsonl (DESIGN.md).
METRIC_NAMES = {
    "reward": "reward/mean",
    "reward_std": "reward/std",
    "reward/group_std": "reward/group_std",
    "group_size": "group_size",
    "frac_reward_zero_std": "reward/frac_zero_std",
    "kl": "kl",
    "grad_norm": "grad_norm",
    "loss": "loss/policy",
    "learning_rate": "learning_rate",
    "completions/mean_length": "completion_length/mean",
    "completions/clipped_ratio": "completion_length/clipped_ratio",
    "entropy": "entropy",
    "clip_ratio/region_mean": "policy/clipfrac",
}


def group_size(recipe: Recipe) -> int:
    """Completions per prompt (TRL's `num_generations`)."""
    return recipe.grpo.get("num_generations", 8)


def samples_per_step(recipe: Recipe) -> int:
    """New prompt-completion pairs per optimizer update, over all processes.

    Each update trains on `per_device_batch_size x gradient_accumulation_steps` completions per process;
    with `num_iterations` > 1 each generated completion is trained on that many times.
    """
    training = recipe.training
    per_update = training.per_device_batch_size * training.gradient_accumulation_steps * world_size()
    return max(1, per_update // recipe.grpo.get("num_iterations", 1))


def count_samples(recipe: Recipe) -> SampleCounter:
    """The sample counter for the metrics and checkpoint names: updates so far x samples per update."""
    return sample_counter(samples_per_step(recipe))


def trainer_config(recipe: Recipe) -> GRPOConfig:
    """The `GRPOConfig` for a recipe: shared sections first, then the recipe's own `grpo:` keys."""
    generation = recipe.generation
    fields: dict[str, Any] = shared_training_args(recipe, samples_per_step(recipe))
    fields.update(
        max_completion_length=generation.max_new_tokens,
        temperature=generation.temperature,
        top_p=generation.top_p,
        top_k=generation.top_k,
        reward_weights=[entry.weight for entry in recipe.rewards],
        trust_remote_code=recipe.model.trust_remote_code,
    )
    if recipe.advantages.normalize != "auto":
        fields["scale_rewards"] = recipe.advantages.normalize
    fields.update(recipe.grpo)
    fields.update(start_values(recipe))
    if generation.min_new_tokens is not None:
        fields["generation_kwargs"] = {
            "min_new_tokens": generation.min_new_tokens,
            **(fields.get("generation_kwargs") or {}),
        }
    try:
        return GRPOConfig(**fields)
    except (ValueError, TypeError) as err:
        raise RecipeError(f"grpo: TRL's GRPOConfig rejects these settings: {err}") from None


def prepare(components: Components) -> None:
    """Checks beyond the recipe's that need the loaded model, made before the run folder is touched."""
    check_router_aux_loss(components.recipe, components.policy)


def check_router_aux_loss(recipe: Recipe, policy: PreTrainedModel) -> None:
    """`grpo.router_aux_loss_coef` only weighs a Mixture-of-Experts router loss.

    Since TRL 1.14 the key defaults to the model's own coefficient, and a value set for a model without
    router logits stops GRPOTrainer at start-up; until then its default (0.001) was ignored for dense
    models, so recipes written then may carry it.
    """
    coef = recipe.grpo.get("router_aux_loss_coef")
    if coef and not hasattr(policy.config.get_text_config(), "output_router_logits"):
        raise RecipeError(
            f"grpo.router_aux_loss_coef is {coef}, but {type(policy).__name__} is not a Mixture-of-Experts "
            "model with router logits, so there is no load-balancing loss to weigh: remove the key"
        )


class UnifiedGRPOTrainer(StagedCheckpoints, GRPOTrainer):
    """`GRPOTrainer` that also logs the mean within-group reward spread (`reward/group_std`) and the
    group size (`group_size`: it can change between stages).

    TRL logs the spread over the whole batch; the spread inside each prompt's group is what GRPO's
    advantages are made of, so a group spread near zero means no learning signal. Checkpoints are
    staged, then completed by `llm_rl.training.checkpoints.CheckpointManager`.
    """

    def __init__(self, *args: Any, held_out: HeldOutReward | None = None, **kwargs: Any) -> None:
        """GRPOTrainer's arguments, plus the held-out reward evaluator (`evaluation.every`)."""
        self.held_out = held_out
        super().__init__(*args, **kwargs)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """A training log, with the held-out reward joined to it on evaluation updates."""
        if self.held_out is not None and "loss" in logs and self.held_out.due(self.state.global_step):
            logs = {**logs, **self.held_out(self.model_wrapped, self.accelerator)}
        super().log(logs, start_time)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        weights = self.reward_weights.to(rewards_per_func.device)
        rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        mode = "train" if self.model.training else "eval"
        group = self.num_generations if mode == "train" else self.num_generations_eval
        spread = rewards.view(-1, group).std(dim=1, unbiased=False).mean()
        self._metrics[mode]["reward/group_std"].append(float(spread))
        self._metrics[mode]["group_size"].append(group)
        return rewards_per_func


def build_trainer(components: Components, callbacks: list[TrainerCallback]) -> GRPOTrainer:
    """A ready-to-train `GRPOTrainer` over the recipe's prompts and reward functions."""
    recipe = components.recipe
    return UnifiedGRPOTrainer(
        model=components.policy,
        reward_funcs=list(components.rewards.functions),
        args=trainer_config(recipe),
        train_dataset=components.data.train,
        processing_class=components.tokenizer,
        callbacks=callbacks,
        peft_config=peft_config(recipe.model.lora),
        held_out=components.held_out,
    )


def apply_setting(trainer: GRPOTrainer, key: str, value: float) -> None:
    """Set a scheduled setting (`llm_rl.recipe.load.SCHEDULABLE`) where GRPOTrainer reads it each update.

    GRPOTrainer copies these from its config once, at start-up, so the copies are what change.
    """
    if key == "grpo.beta":
        trainer.beta = value
    elif key == "grpo.epsilon":
        trainer.epsilon_low = value
        if trainer.args.epsilon_high is None:
            trainer.epsilon_high = value
    elif key == "generation.temperature":
        trainer.temperature = value
        trainer.generation_config.temperature = value
    else:
        raise KeyError(key)
