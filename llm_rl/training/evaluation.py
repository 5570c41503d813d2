"""Reward on held-out prompts, the same way for both algorithms (`evaluation.every`).

Every `evaluation.every` updates (and before the first one with `evaluation.at_start`), the policy
writes one completion for each prompt of the data's eval split (greedy by default: less noise for early
stopping than a sample), with the run's generation backend (on vLLM, the trainer's own engine, given the
policy's current weights first), and the recipe's reward functions score them through `RewardAdapter`, as
PPO's rollouts are scored. The prompts are shared out between the processes; the metrics (`eval/reward/mean`,
`eval/reward/std`, `eval/rewards/<name>/mean`, `eval/num_prompts`) join that update's row, so
`early_stopping.metric: eval/reward/mean` stops on held-out reward. The evaluation at the start is a row
of its own at step 0, written through the trainer's `log` like any other (`EvaluateAtStart`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch
from accelerate import Accelerator
from datasets import Dataset
from transformers import PreTrainedTokenizerBase, TrainerCallback

from llm_rl.data.prompts import tokenize_prompts
from llm_rl.errors import DataError
from llm_rl.generation.generators import build_generator
from llm_rl.generation.sampling import Generator, left_padded, recipe_sampling
from llm_rl.models.completions import eos_token_ids, trimmed
from llm_rl.rewards import RewardSet
from llm_rl.rewards.scoring import RewardAdapter, reward_metrics
from llm_rl.schema import Recipe

if TYPE_CHECKING:
    from transformers import Trainer

EVAL_PREFIX = "eval/"


class HeldOutReward:
    """Scores the policy on the eval split (module docstring)."""

    def __init__(
        self,
        recipe: Recipe,
        eval_rows: Dataset,
        tokenizer: PreTrainedTokenizerBase,
        rewards: RewardSet,
        stop_token_ids: list[int] | None = None,
    ) -> None:
        """`stop_token_ids` end completions (default: the tokenizer's EOS)."""
        settings = recipe.evaluation
        self.stop_token_ids = stop_token_ids or eos_token_ids(tokenizer)
        self.every = settings.every
        self.at_start = settings.at_start
        self.batch_size = settings.batch_size
        self.tokenizer = tokenizer
        self.tokens = tokenize_prompts(eval_rows, tokenizer)
        self.adapter = RewardAdapter(rewards, eval_rows, tokenizer)
        self.sampling = recipe_sampling(
            recipe.generation, self.stop_token_ids, tokenizer.pad_token_id, greedy=settings.greedy
        )

    def due(self, step: int) -> bool:
        return self.every is not None and step % self.every == 0

    @torch.no_grad()
    def __call__(
        self, model: torch.nn.Module, accelerator: Accelerator, policy_of=lambda m: m, engine: Any = None
    ) -> dict[str, Any]:
        """The eval metrics; every process must call it. `policy_of` picks the policy out of `model`;
        `engine` is the trainer's colocated vLLM engine, on the vllm backend."""
        indices = list(range(len(self.tokens)))
        # Equal shares (padded with repeats), so that every process generates the same number of batches.
        with accelerator.split_between_processes(indices, apply_padding=True) as mine:
            was_training = model.training
            model.eval()
            completions = self.generator(model, accelerator, policy_of, engine).generate(
                *left_padded(self.tokens[mine]["input_ids"], self.sampling.pad_token_id)
            )
            model.train(was_training)
        scores, per_fn = self.adapter(mine, trimmed(completions.completion_ids, self.stop_token_ids))
        device = accelerator.device
        score = accelerator.gather(scores.to(device))
        per_fn = accelerator.gather(per_fn.to(device))
        order = accelerator.gather(torch.tensor(mine, device=device))
        first = first_occurrences(order)
        score, per_fn = score[first], per_fn[first]
        metrics = {
            "reward/mean": score.mean().item(),
            "reward/std": score.std().item() if len(score) > 1 else 0.0,
            "num_prompts": len(score),
        }
        metrics.update(reward_metrics(per_fn, self.adapter.rewards.names))
        self.adapter.take_skipped()
        return {EVAL_PREFIX + key: value for key, value in metrics.items()}

    def generator(
        self, model: torch.nn.Module, accelerator: Accelerator, policy_of, engine: Any
    ) -> Generator:
        """The run's backend, `evaluation.batch_size` prompts a call: transformers on the model as trained,
        or the trainer's vLLM engine (which takes the current weights before it generates)."""
        if engine is not None:
            from llm_rl.generation.vllm_engine.generators import VLLMGenerator

            return VLLMGenerator(engine, self.sampling)
        backend = "hf" if self.sampling.backend == "vllm" else self.sampling.backend
        sampling = dataclasses.replace(self.sampling, backend=backend)
        return build_generator(lambda: model, accelerator, sampling, self.batch_size, policy_of=policy_of)


class EvaluateAtStart(TrainerCallback):
    """Logs the held-out reward of the starting policy when training begins (`evaluation.at_start`).

    A callback, so that TRL's trainers and ours share it: both call `on_train_begin` once the model is
    prepared (wrapped for DeepSpeed) and a resumed state is restored, which is when a resumed run, past
    step 0, is told apart and skipped.
    """

    def __init__(self, trainer: Trainer, held_out: HeldOutReward, policy_of=lambda m: m) -> None:
        self.trainer = trainer
        self.held_out = held_out
        self.policy_of = policy_of

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:
            trainer = self.trainer
            engine = trainer.rollout_engine() if hasattr(trainer, "rollout_engine") else None
            trainer.log(self.held_out(trainer.model_wrapped, trainer.accelerator, self.policy_of, engine))
        return control


def first_occurrences(order: torch.Tensor) -> torch.Tensor:
    """Positions of the first occurrence of each eval prompt in the gathered order (drops the padding)."""
    seen: set[int] = set()
    keep = []
    for position, index in enumerate(order.tolist()):
        if index not in seen:
            seen.add(index)
            keep.append(position)
    return torch.tensor(keep, device=order.device)


def held_out_reward(components: Any) -> HeldOutReward | None:
    """The evaluator a recipe asks for (`evaluation.every` or `at_start`), or None; refuses a run without
    eval prompts."""
    recipe, data = components.recipe, components.data
    asked = evaluation_asked_for(recipe)
    if asked is None:
        return None
    if data.eval is not None and len(data.eval) == 0:
        raise DataError(
            f"{asked} is set but every eval prompt is longer than data.max_prompt_length "
            f"({recipe.data.max_prompt_length} tokens)",
            where=recipe.data.label,
        )
    if data.eval is None:
        raise DataError(
            f"{asked} is set but the data has no eval prompts: name a split with data.eval_split, "
            "hold rows out with data.eval_size, or set data.arithmetic.num_eval for the built-in task",
            where=recipe.data.label,
        )
    stop_token_ids = eos_token_ids(components.tokenizer, components.policy.generation_config)
    return HeldOutReward(recipe, data.eval, components.tokenizer, components.rewards, stop_token_ids)


def evaluation_asked_for(recipe: Recipe) -> str | None:
    """The key that asks for held-out evaluation (`evaluation.every`, else `evaluation.at_start`), or None."""
    if recipe.evaluation.every is not None:
        return "evaluation.every"
    return "evaluation.at_start" if recipe.evaluation.at_start else None
