"""Where prompts come from: a local file or folder, a hub dataset, a built-in task, or a mixture of them.

`read_train_and_eval` turns the recipe's `data` section into raw train rows and, where the recipe asks
for them, held-out rows; `llm_rl.data.prompts` then maps their columns and formats their prompts. A
mixture (`data.sources`) is joined as TRL's `datasets:` mixtures are: each dataset's chosen columns, its
share of the rows when weights are given, concatenated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from datasets import (
    Dataset,
    DatasetDict,
    ReadInstruction,
    concatenate_datasets,
    load_dataset,
    load_from_disk,
)

from llm_rl.data.columns import require_column
from llm_rl.data.tasks import build_task
from llm_rl.errors import DataError, first_line
from llm_rl.schema import DataSection, DataSourceEntry

# File extension -> the `datasets` builder that reads it.
FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
BUILTIN_PREFIX = "builtin:"
# What `datasets` says of a file that parses but holds no rows (a header-only csv, `[]`, an empty parquet).
NO_DATA = "corresponds to no data"


@dataclass
class RawSplits:
    """The rows a run trains on and holds out, as read, each with the name errors give it."""

    train: Dataset
    train_where: str
    eval: Dataset | None
    eval_where: str


def read_train_and_eval(data: DataSection, seed: int) -> RawSplits:
    """The train rows of `data.source` (or of the `data.sources` mixture) and its held-out rows: the
    eval split, or `data.eval_size` rows taken from the train rows."""
    if data.sources:
        train = read_mixture(data, seed)
        raw = RawSplits(train, f"data.sources ({data.label})", None, "")
    else:
        splits = read_splits(data.source, seed, data, data.config)
        train = pick_split(splits, data.split, data.source, key="data.split")
        raw = RawSplits(train, f"{data.source} [{data.split}]", None, "")
        eval_name = data.eval_split or ("eval" if data.source.startswith(BUILTIN_PREFIX) else None)
        wanted = data.eval_split is not None or (eval_name in splits and data.eval_size is None)
        if eval_name is not None and wanted:
            raw.eval = pick_split(splits, eval_name, data.source, key="data.eval_split")
            raw.eval_where = f"{data.source} [{eval_name}]"
    if data.eval_size is not None:
        raw.train, raw.eval = hold_out(raw.train, data.eval_size, seed, raw.train_where)
        raw.eval_where = f"{raw.train_where}, data.eval_size held out"
    return raw


def hold_out(train: Dataset, size: float | int, seed: int, where: str) -> tuple[Dataset, Dataset]:
    """(train, held out): `size` rows (or that fraction of them) taken at random, seeded."""
    if isinstance(size, int) and size >= len(train):
        raise DataError(
            f"data.eval_size: holding out {size} of {len(train)} rows leaves no train prompts", where=where
        )
    parts = train.train_test_split(test_size=size, seed=seed)
    return parts["train"], parts["test"]


def read_splits(
    source: str, seed: int, data: DataSection, config: str | None = None, key: str = "data"
) -> dict[str, Dataset]:
    """The splits of one source, by name; `config` is a hub dataset's configuration. Errors name the
    recipe keys under `key` (`data`, or `data.sources[i]` in a mixture)."""
    if source.startswith(BUILTIN_PREFIX):
        refuse_config(config, f"{key}.config", source, "a built-in task")
        return build_task(source[len(BUILTIN_PREFIX) :], data, seed)
    path = Path(source).expanduser()
    if path.is_file():
        refuse_config(config, f"{key}.config", source, "a local file")
        return {"train": read_file(path)}
    if path.is_dir():
        refuse_config(config, f"{key}.config", source, "a local folder")
        return read_folder(path)
    if looks_like_path(source):
        raise DataError(f"{key}.source: dataset file or folder not found", where=source)
    return read_hub(source, config, f"{key}.source")


def refuse_config(config: str | None, key: str, source: str, kind: str) -> None:
    """A configuration names a part of a hub dataset; anything else has none."""
    if config is not None:
        raise DataError(
            f"{key}: {config!r} names a hub dataset's configuration, but this is {kind}", where=source
        )


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


def read_hub(name: str, config: str | None = None, key: str = "data.source") -> dict[str, Dataset]:
    """A dataset from the hub (or the local hub cache when offline), in `config` where one is named."""
    try:
        return dict(load_dataset(name, config))
    except Exception as err:
        message = f"{key}: not a local file or folder, and not loadable as a hub dataset: {first_line(err)}"
        raise DataError(message, where=name) from None


def pick_split(splits: dict[str, Dataset], name: str, source: str, key: str) -> Dataset:
    """One split by name, or part of one in `datasets`' slicing syntax (`train[:-100]`, `train[10%:]`,
    several joined by `+`); a missing split names those that exist."""
    if name in splits:
        return splits[name]
    if "[" not in name and "+" not in name:
        known = ", ".join(sorted(splits))
        raise DataError(f"{key}: no split {name!r}; the source has: {known}", where=source)
    try:
        parts = ReadInstruction.from_spec(name).to_absolute({s: len(d) for s, d in splits.items()})
    except (ValueError, AssertionError) as err:
        raise DataError(
            f"{key}: {name!r} is not a split or a slice of one ({first_line(err)})", where=source
        ) from None
    chosen = [splits[part.splitname].select(range(part.from_, part.to)) for part in parts]
    return chosen[0] if len(chosen) == 1 else concatenate_datasets(chosen)


# ----------------------------------------------------------------------------------------------------
# Mixtures
# ----------------------------------------------------------------------------------------------------


def read_mixture(data: DataSection, seed: int) -> Dataset:
    """The `data.sources` joined into one train set: each source's columns, its share when weighted."""
    entries = data.sources or []
    parts = [read_mixture_part(entry, index, data, seed) for index, entry in enumerate(entries)]
    parts = with_shared_columns(parts, entries)
    weights = [entry.weight for entry in entries if entry.weight is not None]
    if len(weights) == len(parts):
        sizes = mixture_sizes([len(part) for part in parts], weights)
        parts = [part.shuffle(seed=seed).select(range(size)) for part, size in zip(parts, sizes, strict=True)]
    return concatenate_datasets(parts)


def read_mixture_part(entry: DataSourceEntry, index: int, data: DataSection, seed: int) -> Dataset:
    """One source of the mixture (`data.sources[index]`): its split, with its chosen columns."""
    key = f"data.sources[{index}]"
    splits = read_splits(entry.source, seed, data, entry.config, key)
    part = pick_split(splits, entry.split, entry.source, key=f"{key}.split")
    if entry.columns is not None:
        for name in entry.columns:
            require_column(part, name, f"{key}.columns", where=entry.source)
        part = part.select_columns(entry.columns)
    if len(part) == 0:
        raise DataError(f"{key}: the dataset has no rows", where=entry.source)
    return part


def with_shared_columns(parts: list[Dataset], entries: list[DataSourceEntry]) -> list[Dataset]:
    """The parts with the first one's columns and column types: a mixture is one table."""
    first = parts[0]
    joined = [first]
    for index, part in enumerate(parts[1:], start=1):
        where = entries[index].source
        if set(part.column_names) != set(first.column_names):
            raise DataError(
                f"data.sources[{index}]: columns {sorted(part.column_names)} differ from data.sources[0]'s "
                f"{sorted(first.column_names)}; choose the shared ones with data.sources[].columns",
                where=where,
            )
        if part.features != first.features:
            try:
                part = part.cast(first.features)
            except Exception as err:
                raise DataError(
                    f"data.sources[{index}]: its column types ({part.features}) do not convert to "
                    f"data.sources[0]'s: {first_line(err)}",
                    where=where,
                ) from None
        joined.append(part)
    return joined


def mixture_sizes(lengths: list[int], weights: list[float]) -> list[int]:
    """Rows taken from each dataset so that each holds its weight's share of the mixture (the weights
    normalised) and none is repeated: the largest mixture the scarcest dataset allows."""
    shares = [weight / sum(weights) for weight in weights]
    total = min(length / share for length, share in zip(lengths, shares, strict=True))
    return [min(length, round(share * total)) for length, share in zip(lengths, shares, strict=True)]
