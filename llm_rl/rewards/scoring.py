"""The recipe's reward functions as one scorer: a number per completion, for PPO and for evaluation.

`RewardAdapter` scores completions given as token ids, each cut after its stop token:

1. each prompt's dataset row is found by its `row_index`, so the reward functions get the row's prompt
   and columns (the ground truth in `answer`, ...);
2. each completion is decoded (special tokens dropped) into text, or into one assistant message when
   the prompts are conversational, as GRPO passes them;
3. every reward function is called with GRPO's signature, `fn(prompts, completions, completion_ids,
   **columns)`, so the same `rewards:` list drives both algorithms unchanged;
4. the weighted values are summed per sample. `None` means "not applicable", as under GRPO: it adds
   nothing to the sum; a sample for which every function returns None scores `ppo.none_reward`
   (default 0.0), since PPO needs a number for every sample.

Learned reward models are reward functions like the others (`name: reward_model`): they read the
decoded text through their own tokenizer, so a reward model that shares the policy's tokenizer and one
that does not both work. Per-reward values are returned too, for `rewards/<name>/mean|std` metrics
under the same names as GRPO.
"""

from __future__ import annotations

import torch
from datasets import Dataset
from transformers import PreTrainedTokenizerBase

from llm_rl.rewards import RewardSet


class RewardAdapter:
    """Scores completions with the recipe's reward functions (module docstring)."""

    def __init__(
        self,
        rewards: RewardSet,
        prompts: Dataset,
        tokenizer: PreTrainedTokenizerBase,
        none_reward: float = 0.0,
    ) -> None:
        self.rewards = rewards
        self.prompts = prompts
        self.tokenizer = tokenizer
        self.none_reward = none_reward
        # Samples dropped by `on_invalid: skip` since the last `take_skipped()`, by reward name.
        self.skipped = dict.fromkeys(rewards.names, 0)
        self.weights = torch.tensor(rewards.weights, dtype=torch.float32)

    def per_function(self, row_indices: list[int], completion_ids: list[list[int]]) -> torch.Tensor:
        """A (samples, functions) matrix of reward values, NaN where a function returned None."""
        rows = self.prompts[list(row_indices)]
        prompts = rows.pop("prompt")
        texts = self.tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
        conversational = bool(prompts) and isinstance(prompts[0], list)
        completions = (
            [[{"role": "assistant", "content": text}] for text in texts] if conversational else texts
        )
        columns = []
        for function in self.rewards.functions:
            values = function(prompts=prompts, completions=completions, completion_ids=completion_ids, **rows)
            self.skipped[function.__name__] += function.last_skipped
            columns.append([float("nan") if value is None else value for value in values])
        return torch.tensor(columns, dtype=torch.float32).T.contiguous()

    def take_skipped(self) -> dict[str, int]:
        """The skipped-sample counts of the rewards that skip, since the last call (then reset)."""
        pairs = zip(self.rewards.names, self.rewards.functions, strict=True)
        counts = {name: self.skipped[name] for name, function in pairs if function.on_invalid == "skip"}
        self.skipped = dict.fromkeys(self.skipped, 0)
        return counts

    def combine(self, values: torch.Tensor) -> torch.Tensor:
        """The weighted sum per sample; `none_reward` where no function applied."""
        total = (values * self.weights).nansum(dim=1)
        return torch.where(torch.isnan(values).all(dim=1), torch.full_like(total, self.none_reward), total)

    def __call__(
        self, row_indices: list[int], completion_ids: list[list[int]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(scores, per-function values) of completions (token ids up to and with their stop token), on
        the CPU."""
        values = self.per_function(row_indices, completion_ids)
        return self.combine(values), values


def reward_metrics(values: torch.Tensor, names: list[str]) -> dict[str, float]:
    """`rewards/<name>/mean` and `/std` over the samples where each function applied, as GRPO logs them."""
    metrics = {}
    for column, name in enumerate(names):
        applied = values[:, column][~torch.isnan(values[:, column])]
        metrics[f"rewards/{name}/mean"] = applied.mean().item() if len(applied) else float("nan")
        metrics[f"rewards/{name}/std"] = applied.std().item() if len(applied) > 1 else float("nan")
    return metrics
