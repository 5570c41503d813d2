"""What a recipe resolves to before a trainer is built: tokenizer, policy, prompts and rewards."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from llm_rl.data.prompts import PromptData
from llm_rl.rewards import RewardSet
from llm_rl.schema import Recipe


@dataclass
class Components:
    """Everything a trainer builder needs; built once by `llm_rl.run.training.build_components`."""

    recipe: Recipe
    # The run's tokenizer (left padding, a pad token: `llm_rl.models.load.training_tokenizer`).
    tokenizer: PreTrainedTokenizerBase
    policy: PreTrainedModel
    data: PromptData
    rewards: RewardSet
    # The folder the policy was loaded from (TRL reloads reference models from it).
    policy_path: str
    # Reward on the eval split every `evaluation.every` updates (llm_rl.training.evaluation), when asked for.
    held_out: Any = None
    extras: dict[str, Any] | None = None
    # The tokenizer as the user gave it: what `final/` and checkpoints save. None: `tokenizer`.
    saved_tokenizer: PreTrainedTokenizerBase | None = None
