"""Reward on held-out prompts, the same way for both algorithms (`evaluation.every`).

Every `evaluation.every` updates (and before the first one with `evaluation.at_start`), the policy
writes one completion for each prompt of the data's eval split (greedy by default: less noise for early
stopping than a sample), and the recipe's reward functions score them through `RewardAdapter`, as PPO's
rollouts are scored. The prompts are shared out between the processes; the metrics (`eval/reward/mean`,
`eval/reward/std`, `eval/rewards/<name>/mean`, `eval/num_prompts`) join that update's row, so
`early_stopping.metric: eval/reward/mean` stops on held-out reward. The evaluation at the start is a row
of its own at step 0, written through the trainer's `log` like any other (`EvaluateAtStart`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from accelerate import Accelerator
from datasets import Dataset
from transformers import GenerationConfig, PreTrainedTokenizerBase, TrainerCallback
from trl.models.utils import unwrap_model_for_generation

from llm_rl.data.prompts import ROW_INDEX, tokenize_prompts
from llm_rl.errors import DataError
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
        generation = recipe.generation
        sampling: dict[str, Any] = {"do_sample": False}
        if not settings.greedy:
            sampling = {
                "do_sample": True,
                "temperature": generation.temperature,
                "top_p": generation.top_p,
                "top_k": generation.top_k or 0,
            }
        self.generation_config = GenerationConfig(
            max_new_tokens=generation.max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=self.stop_token_ids,
            **sampling,
        )

    def due(self, step: int) -> bool:
        return self.every is not None and step % self.every == 0

    @torch.no_grad()
    def __call__(
        self, model: torch.nn.Module, accelerator: Accelerator, policy_of=lambda m: m
    ) -> dict[str, Any]:
        """The eval metrics; every process must call it. `policy_of` picks the policy out of `model`."""
        indices = list(range(len(self.tokens)))
        scores, values, seen = [], [], []
        # Equal shares (padded with repeats), so that every process generates the same number of batches.
        with (
            accelerator.split_between_processes(indices, apply_padding=True) as mine,
            unwrap_model_for_generation(model, accelerator) as unwrapped,
        ):
            policy = policy_of(unwrapped)
            was_training = policy.training
            policy.eval()
            for start in range(0, len(mine), self.batch_size):
                batch = mine[start : start + self.batch_size]
                score, per_fn = self.score(policy, batch, accelerator.device)
                scores.append(score)
                values.append(per_fn)
                seen.append(torch.tensor(batch, device=accelerator.device))
            policy.train(was_training)
        score = accelerator.gather(torch.cat(scores))
        per_fn = accelerator.gather(torch.cat(values))
        order = accelerator.gather(torch.cat(seen))
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

    def score(
        self, policy: torch.nn.Module, indices: list[int], device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Generate for some eval prompts and score the completions: (scores, per-function values)."""
        rows = self.tokens[indices]
        queries = self.tokenizer.pad({"input_ids": rows["input_ids"]}, return_tensors="pt").to(device)
        output = policy.generate(**queries, generation_config=self.generation_config)
        responses = output[:, queries["input_ids"].shape[1] :]
        scores, values = self.adapter(rows[ROW_INDEX], trimmed(responses, self.stop_token_ids))
        return scores.to(device), values.to(device)


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
            trainer.log(self.held_out(trainer.model_wrapped, trainer.accelerator, self.policy_of))
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
