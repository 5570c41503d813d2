"""Prompt datasets shared by both algorithms: load, map columns, format prompts, filter by length, tokenize.

Every source ends as a `datasets.Dataset` with a `prompt` column (a string, or a list of chat messages
when the tokenizer has a chat template) and the columns the reward functions receive. GRPO takes that
dataset as is; PPO needs token ids, which `tokenize_prompts` adds as its own step, tokenizing exactly as
TRL's GRPOTrainer does so that both algorithms see the same prompt tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasets import Dataset, DatasetDict, load_dataset, load_from_disk
from transformers import PreTrainedTokenizerBase

from llm_rl.data.tasks import build_task
from llm_rl.errors import DataError, first_line
from llm_rl.schema import DataSection

# File extension -> the `datasets` builder that reads it.
FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
BUILTIN_PREFIX = "builtin:"
# The integer column PPO carries through TRL's collator to find a sample's row (DESIGN.md).
ROW_INDEX = "row_index"
# What `datasets` says of a file that parses but holds no rows (a header-only csv, `[]`, an empty parquet).
NO_DATA = "corresponds to no data"


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
    splits = read_splits(data, seed)
    train_raw = pick_split(splits, data.split, data.source, key="data.split")
    eval_name = data.eval_split or ("eval" if data.source.startswith(BUILTIN_PREFIX) else None)
    eval_raw = None
    if eval_name is not None and (data.eval_split is not None or eval_name in splits):
        eval_raw = pick_split(splits, eval_name, data.source, key="data.eval_split")
    train, dropped = prepare_split(train_raw, data, tokenizer, seed, where=f"{data.source} [{data.split}]")
    evaluation = None
    if eval_raw is not None:
        evaluation, eval_dropped = prepare_split(
            eval_raw, data, tokenizer, seed, where=f"{data.source} [{eval_name}]"
        )
        dropped += eval_dropped
    reward_columns = [name for name in train.column_names if name != "prompt"]
    return PromptData(train, evaluation, dropped, reward_columns)


# ----------------------------------------------------------------------------------------------------
# Sources
# ----------------------------------------------------------------------------------------------------


def read_splits(data: DataSection, seed: int) -> dict[str, Dataset]:
    """The splits of the recipe's source, by name."""
    source = data.source
    if source.startswith(BUILTIN_PREFIX):
        return build_task(source[len(BUILTIN_PREFIX) :], data, seed)
    path = Path(source).expanduser()
    if path.is_file():
        return {"train": read_file(path)}
    if path.is_dir():
        return read_folder(path)
    if looks_like_path(source):
        raise DataError("dataset file or folder not found", where=source)
    return read_hub(source)


def looks_like_path(source: str) -> bool:
    """A source meant as a local path (a hub id is `name` or `org/name`, with no data-file extension)."""
    return (
        source.startswith(("/", ".", "~"))
        or source.count("/") > 1
        or Path(source).suffix.lower() in FILE_BUILDERS
    )


def read_file(path: Path) -> Dataset:
    """One jsonl, json, parquet or csv file as a dataset."""
    builder = FILE_BUILDERS.get(path.suffix.lower())
    if builder is None:
        known = ", ".join(FILE_BUILDERS)
        raise DataError(f"unsupported file type {path.suffix!r}; use one of {known}", where=str(path))
    try:
        return load_dataset(builder, data_files=str(path), split="train")
    except Exception as err:
        raise DataError(describe_unreadable(path, err), where=str(path)) from None


def describe_unreadable(path: Path, err: Exception) -> str:
    """Why a file did not load: for JSON Lines, the first line that is not a JSON object."""
    if path.suffix.lower() == ".jsonl":
        with path.open(encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as decode_error:
                    return f"line {number} is not valid JSON ({decode_error.msg})"
                if not isinstance(row, dict):
                    return f"line {number} is not a JSON object"
    if is_blank(path) or NO_DATA in str(err):
        return "the dataset has no rows"
    return f"could not read the file: {type(err).__name__}: {first_line(err)}"


def is_blank(path: Path) -> bool:
    """A file with nothing but whitespace (`datasets` fails on one with an opaque StopIteration)."""
    size = path.stat().st_size
    return size == 0 or (size < 1 << 20 and not path.read_bytes().strip())


def read_folder(path: Path) -> dict[str, Dataset]:
    """A `save_to_disk` folder, or a folder of data files whose names give the splits (train.jsonl, ...)."""
    if (path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file():
        return read_saved(path)
    files = sorted(file for file in path.iterdir() if file.suffix.lower() in FILE_BUILDERS)
    if not files:
        raise DataError(
            "folder holds no save_to_disk dataset and no jsonl/json/parquet/csv file", where=str(path)
        )
    return {file.stem: read_file(file) for file in files}


def read_saved(path: Path) -> dict[str, Dataset]:
    """A `save_to_disk` folder: a Dataset (the `train` split) or a DatasetDict."""
    try:
        loaded = load_from_disk(str(path))
    except Exception as err:
        empty = saved_splits_without_rows(path)
        if empty:
            # `datasets` saves a split with no rows as zero shards, then fails to load it (IndexError).
            message = f"the dataset has no rows (empty: {', '.join(empty)})"
        else:
            message = f"could not load the save_to_disk folder: {type(err).__name__}: {first_line(err)}"
        raise DataError(message, where=str(path)) from None
    return dict(loaded) if isinstance(loaded, DatasetDict) else {"train": loaded}


def saved_splits_without_rows(path: Path) -> list[str]:
    """The splits of a `save_to_disk` folder saved with no data files ("train" for a plain Dataset)."""
    states = {"train": path / "state.json", **{s.parent.name: s for s in sorted(path.glob("*/state.json"))}}
    empty = []
    for split, state in states.items():
        try:
            files = json.loads(state.read_text(encoding="utf-8")).get("_data_files")
        except (OSError, ValueError, AttributeError):
            continue
        if files == []:
            empty.append(split)
    return empty


def read_hub(name: str) -> dict[str, Dataset]:
    """A dataset from the hub (or the local hub cache when offline)."""
    try:
        return dict(load_dataset(name))
    except Exception as err:
        message = f"not a local file or folder, and not loadable as a hub dataset: {first_line(err)}"
        raise DataError(message, where=name) from None


def pick_split(splits: dict[str, Dataset], name: str, source: str, key: str) -> Dataset:
    """One split by name; a missing one names those that exist."""
    if name not in splits:
        known = ", ".join(sorted(splits))
        raise DataError(f"{key}: no split {name!r}; the source has: {known}", where=source)
    return splits[name]


# ----------------------------------------------------------------------------------------------------
# Columns and prompts
# ----------------------------------------------------------------------------------------------------


def prepare_split(
    dataset: Dataset, data: DataSection, tokenizer: PreTrainedTokenizerBase, seed: int, where: str
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
    if len(dataset) == 0:
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


def require_column(dataset: Dataset, name: str, key: str, where: str) -> None:
    """A DataError naming the missing column and the columns that exist."""
    if name not in dataset.column_names:
        existing = ", ".join(dataset.column_names)
        raise DataError(f"{key}: no column {name!r}; the dataset has: {existing}", where=where)


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
