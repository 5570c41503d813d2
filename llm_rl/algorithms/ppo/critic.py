"""PPO's critic: a sequence-classification model with one output, read at every response position.

`ppo.value_model` says where its weights come from:

- `policy` (default): the policy's weights with a fresh scalar head, zero-initialised so that every
  value starts at 0 and the first updates fit the head before they move the body;
- `reward_model`: the folder of the recipe's `reward_model` reward (OpenRLHF's default: a reward model
  already reads the task's text, so it is a good start for a critic);
- a path: any local sequence-classification (or causal LM) folder, e.g. a critic from an earlier run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils import logging as transformers_logging

from llm_rl.algorithms.ppo.settings import ppo_settings
from llm_rl.errors import ModelError, RecipeError, first_line
from llm_rl.models.load import model_dtype, resolve_model_path
from llm_rl.schema import Recipe


def value_model_source(recipe: Recipe, policy_path: str) -> tuple[str, bool]:
    """(folder to load, whether its scalar head is new) for `ppo.value_model`."""
    choice = ppo_settings(recipe).value_model
    if choice == "policy":
        return policy_path, True
    if choice == "reward_model":
        paths = [entry.kwargs.get("path") for entry in recipe.rewards if entry.name == "reward_model"]
        if not paths or not paths[0]:
            raise RecipeError(
                "ppo.value_model: 'reward_model' needs a `reward_model` entry with a `path` in rewards:"
            )
        return str(paths[0]), False
    path = Path(choice).expanduser()
    if not (path / "config.json").is_file():
        raise ModelError("ppo.value_model: not a model folder (no config.json)", where=choice)
    return resolve_model_path(str(path)), is_causal_lm(path)


def is_causal_lm(folder: Path) -> bool:
    """Whether a folder holds a causal LM (its config names a `...ForCausalLM` architecture)."""
    architectures = json.loads((folder / "config.json").read_text()).get("architectures") or []
    return any(name.endswith("ForCausalLM") for name in architectures)


def load_value_model(recipe: Recipe, policy_path: str, tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    """The critic for a recipe, with one output per token and the policy's pad token.

    The critic reads the policy's tokens, so its vocabulary must cover the policy tokenizer's (a reward
    model with a tokenizer of its own can score text under `rewards:`, but not be the critic).
    """
    folder, head_is_new = value_model_source(recipe, policy_path)
    try:
        with quiet_transformers():
            model = AutoModelForSequenceClassification.from_pretrained(
                folder,
                num_labels=1,
                dtype=model_dtype(recipe.model.dtype, recipe.training.precision),
                trust_remote_code=recipe.model.trust_remote_code,
            )
    except Exception as err:
        raise ModelError(
            f"ppo.value_model does not load as a critic: {first_line(err)}", where=folder
        ) from None
    if not hasattr(model, "score"):
        raise ModelError(
            f"ppo.value_model: {type(model).__name__} has no `score` head, which PPO reads values from",
            where=folder,
        )
    if folder != policy_path:
        check_reads_policy_tokens(model, folder, tokenizer)
    model.config.pad_token_id = tokenizer.pad_token_id
    if head_is_new:
        zero_scalar_head(model)
    return model


def check_reads_policy_tokens(
    model: PreTrainedModel, folder: str, tokenizer: PreTrainedTokenizerBase
) -> None:
    """Refuse a critic whose tokenizer (or, without one, whose embedding table) is not the policy's."""
    problem = None
    if (Path(folder) / "tokenizer_config.json").is_file():
        if AutoTokenizer.from_pretrained(folder).get_vocab() != tokenizer.get_vocab():
            problem = "its tokenizer's vocabulary differs from the policy's"
    elif model.get_input_embeddings().num_embeddings < len(tokenizer):
        problem = f"it knows fewer token ids than the policy's tokenizer has ({len(tokenizer)})"
    if problem:
        raise ModelError(
            f"ppo.value_model: {problem}; the critic reads the policy's tokens, so it needs the policy's "
            "vocabulary (a reward model with a tokenizer of its own can still score under rewards:)",
            where=folder,
        )


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """Hide transformers' load report: a causal LM loaded as a critic always lacks `score` and has `lm_head`."""
    previous = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers_logging.set_verbosity(previous)


def zero_scalar_head(model: PreTrainedModel) -> None:
    """Set the critic's output layer to zero: values start at 0, not at random."""
    with torch.no_grad():
        model.score.weight.zero_()
        if getattr(model.score, "bias", None) is not None:
            model.score.bias.zero_()
