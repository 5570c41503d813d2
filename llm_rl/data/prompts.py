"""Prompt datasets shared by both algorithms: load (`llm_rl.data.sources`), map columns, format prompts,
filter by length, tokenize.

Every source ends as a `datasets.Dataset` with a `prompt` column (a string, or a list of chat messages
when the tokenizer has a chat template) and the columns the reward functions receive. GRPO takes that
dataset as is; PPO needs token ids, which `tokenize_prompts` adds as its own step, tokenizing exactly as
TRL's GRPOTrainer does so that both algorithms see the same prompt tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from datasets import Dataset
from transformers import PreTrainedTokenizerBase

from llm_rl.data.columns import require_column
from llm_rl.data.sources import read_train_and_eval
from llm_rl.errors import DataError
from llm_rl.schema import DataSection

# The integer column PPO carries through TRL's collator to find a sample's row (DESIGN.md).
ROW_INDEX = "row_index"


@dataclass
class PromptData:
    """The prompts of a run and what was done to them."""

    train: Dataset
    eval: Dataset | None
    # Rows dropped (train and eval together) for being longer than `data.max_prompt_length`.
    dropped_too_long: int
    # The columns, besides `prompt`, that reach the reward functions as keyword arguments.
    reward_columns: list[str]


def load_prompt_data(data: DataSection, tokenizer: PreTrainedTokenizerBase, seed: int) -> PromptData:
    """Load the recipe's dataset and prepare its train (and eval) split for both algorithms."""
    raw = read_train_and_eval(data, seed)
    train, dropped = prepare_split(raw.train, data, tokenizer, seed, where=raw.train_where)
    evaluation = None
    if raw.eval is not None:
        # Held-out prompts all over the length limit leave an empty eval split: an error only for a run
        # that evaluates (`llm_rl.training.evaluation.held_out_reward`), not for one with evaluation off.
        evaluation, eval_dropped = prepare_split(
            raw.eval, data, tokenizer, seed, where=raw.eval_where, may_drop_all=True
        )
        dropped += eval_dropped
    reward_columns = [name for name in train.column_names if name != "prompt"]
    return PromptData(train, evaluation, dropped, reward_columns)


# ----------------------------------------------------------------------------------------------------
# Columns and prompts
# ----------------------------------------------------------------------------------------------------


def prepare_split(
    dataset: Dataset,
    data: DataSection,
    tokenizer: PreTrainedTokenizerBase,
    seed: int,
    where: str,
    may_drop_all: bool = False,
) -> tuple[Dataset, int]:
    """Map columns, check and format prompts, drop those over the length limit; returns (dataset, dropped)."""
    dataset = select_columns(rename_columns(dataset, data, where), data, where)
    if len(dataset) == 0:
        raise DataError("the dataset has no rows", where=where)
    check_prompts(dataset["prompt"], where)
    dataset = format_prompts(dataset, data, tokenizer, where)
    if data.limit is not None and data.limit < len(dataset):
        dataset = dataset.shuffle(seed=seed).select(range(data.limit))
    dataset, dropped = drop_long_prompts(dataset, data.max_prompt_length, tokenizer)
    if len(dataset) == 0 and not may_drop_all:
        raise DataError(
            f"every prompt is longer than data.max_prompt_length ({data.max_prompt_length} tokens)",
            where=where,
        )
    return dataset, dropped


def rename_columns(dataset: Dataset, data: DataSection, where: str) -> Dataset:
    """Apply `data.rename_columns`, then name the prompt column `prompt`."""
    renames = dict(data.rename_columns)
    for old in renames:
        require_column(dataset, old, f"data.rename_columns.{old}", where)
    dataset = dataset.rename_columns(renames) if renames else dataset
    require_column(dataset, data.prompt_column, "data.prompt_column", where)
    if data.prompt_column != "prompt":
        if "prompt" in dataset.column_names:
            dataset = dataset.remove_columns("prompt")
        dataset = dataset.rename_column(data.prompt_column, "prompt")
    return dataset


def select_columns(dataset: Dataset, data: DataSection, where: str) -> Dataset:
    """Keep the prompt and the columns meant for the reward functions (`data.columns`; None keeps all)."""
    if data.columns is None:
        return dataset
    for name in data.columns:
        require_column(dataset, name, "data.columns", where)
    return dataset.select_columns(["prompt", *[name for name in data.columns if name != "prompt"]])


def check_prompts(prompts: list[Any], where: str) -> None:
    """Every prompt is non-empty text or a list of {role, content} messages; the first bad row is named."""
    for row, prompt in enumerate(prompts):
        problem = prompt_problem(prompt)
        if problem:
            raise DataError(f"row {row}: prompt {problem}", where=where)


def prompt_problem(prompt: Any) -> str | None:
    """What is wrong with one prompt, or None."""
    if isinstance(prompt, str):
        return None if prompt.strip() else "is empty"
    if isinstance(prompt, list) and prompt:
        for message in prompt:
            if not (
                isinstance(message, dict) and isinstance(message.get("role"), str) and "content" in message
            ):
                return "is a list, but not of {role, content} messages"
        return None
    return f"must be text or a list of chat messages, not {type(prompt).__name__} ({str(prompt)[:40]!r})"


def has_chat_template(tokenizer: PreTrainedTokenizerBase) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def format_prompts(
    dataset: Dataset, data: DataSection, tokenizer: PreTrainedTokenizerBase, where: str
) -> Dataset:
    """Turn text prompts into chat messages when the tokenizer has a template; add the system prompt.

    Without a chat template a system prompt is put before the text, separated by a blank line.
    """
    conversational = isinstance(dataset[0]["prompt"], list)
    use_template = has_chat_template(tokenizer) and data.chat_template
    if conversational and not has_chat_template(tokenizer):
        raise DataError("prompts are chat messages, but the tokenizer has no chat template", where=where)
    system = data.system_prompt
    if not use_template and system is None:
        return dataset
    return dataset.map(
        lambda row: {"prompt": format_prompt(row["prompt"], use_template, system)}, desc="formatting prompts"
    )


def format_prompt(prompt: str | list[dict[str, Any]], use_template: bool, system: str | None) -> Any:
    """One prompt as the policy sees it: messages when the chat template is used, the system prompt added."""
    if isinstance(prompt, str) and use_template:
        prompt = [{"role": "user", "content": prompt}]
    if system is None:
        return prompt
    if isinstance(prompt, str):
        return f"{system}\n\n{prompt}"
    if prompt[0]["role"] == "system":
        return prompt
    return [{"role": "system", "content": system}, *prompt]


# ----------------------------------------------------------------------------------------------------
# Tokens
# ----------------------------------------------------------------------------------------------------


def prompt_token_ids(prompt: str | list[dict[str, Any]], tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The token ids the policy sees for one prompt, as TRL's GRPOTrainer computes them."""
    if isinstance(prompt, str):
        return list(tokenizer(text=prompt)["input_ids"])
    encoded = tokenizer.apply_chat_template(
        prompt, add_generation_prompt=True, tokenize=True, return_dict=True
    )
    return list(encoded["input_ids"])


def longest_prompt(dataset: Dataset, max_length: int | None, tokenizer: PreTrainedTokenizerBase) -> int:
    """The longest prompt in tokens: `data.max_prompt_length` when set (longer ones were dropped), else
    counted over the dataset."""
    if max_length is not None:
        return max_length
    return max(len(prompt_token_ids(prompt, tokenizer)) for prompt in dataset["prompt"])


def drop_long_prompts(
    dataset: Dataset, max_length: int | None, tokenizer: PreTrainedTokenizerBase
) -> tuple[Dataset, int]:
    """Drop (never truncate) prompts over `max_length` tokens; returns the kept rows and how many were dropped."""
    if max_length is None:
        return dataset, 0
    kept = dataset.filter(
        lambda row: len(prompt_token_ids(row["prompt"], tokenizer)) <= max_length,
        desc="checking prompt lengths",
    )
    return kept, len(dataset) - len(kept)


def tokenize_prompts(
    dataset: Dataset, tokenizer: PreTrainedTokenizerBase, num_proc: int | None = None
) -> Dataset:
    """`input_ids` and `row_index` for each prompt: what generation reads, and the way back to the row."""
    return dataset.map(
        lambda row, index: {"input_ids": prompt_token_ids(row["prompt"], tokenizer), ROW_INDEX: index},
        with_indices=True,
        remove_columns=dataset.column_names,
        num_proc=num_proc,
        desc="tokenizing prompts",
    )
