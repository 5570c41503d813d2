"""Where prompts come from: mixtures of datasets (`data.sources`), hub configurations, held-out rows.

Real `datasets` loading of files written in tmp_path and of the built-in task, through the tiny model's
tokenizer; `mixture_sizes` is the pure arithmetic of a weighted mixture.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llm_rl.data.sources import mixture_sizes
from tests.data.conftest import data_error, load, rows_of


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def sums(path: Path, count: int, offset: int = 0, **extra: Any) -> str:
    """`count` rows of single-digit sums, each with its answer and any extra columns."""
    rows = [
        {"prompt": f"{(i + offset) % 10}+{i % 7}=", "answer": str((i + offset) % 10 + i % 7), **extra}
        for i in range(count)
    ]
    return write_jsonl(path, rows)


# ----------------------------------------------------------------------------------------------------
# The arithmetic of a weighted mixture
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lengths", "weights", "sizes"),
    [
        ([100, 40], [1.0, 1.0], [40, 40]),  # the smaller dataset caps an even mixture
        ([100, 100], [3.0, 1.0], [100, 33]),  # 3:1, with every row of the first
        ([10, 1000], [0.5, 0.5], [10, 10]),
        ([60, 30, 30], [0.5, 0.25, 0.25], [60, 30, 30]),  # shares that fit exactly take everything
        ([50], [0.2], [50]),  # one dataset is all of the mixture whatever its weight
    ],
)
def test_mixture_sizes_keep_the_shares_and_repeat_no_row(
    lengths: list[int], weights: list[float], sizes: list[int]
) -> None:
    assert mixture_sizes(lengths, weights) == sizes
    assert all(size <= length for size, length in zip(sizes, lengths, strict=True))


# ----------------------------------------------------------------------------------------------------
# Mixtures
# ----------------------------------------------------------------------------------------------------


def test_a_mixture_joins_every_row_of_its_sources(tokenizer, tmp_path: Path) -> None:
    first = sums(tmp_path / "a.jsonl", 30)
    second = sums(tmp_path / "b.jsonl", 20, offset=3)
    data = load(tokenizer, sources=[{"source": first}, {"source": second}])
    assert len(data.train) == 50
    assert data.eval is None
    assert data.reward_columns == ["answer"]


def test_weights_take_each_sources_share_without_repeats(tokenizer, tmp_path: Path) -> None:
    first = sums(tmp_path / "a.jsonl", 100, source_name="a")
    second = sums(tmp_path / "b.jsonl", 100, source_name="b")
    data = load(tokenizer, sources=[{"source": first, "weight": 3.0}, {"source": second, "weight": 1.0}])
    names = data.train["source_name"]
    assert (names.count("a"), names.count("b")) == (100, 33)
    assert len(set(zip(data.train["prompt"], names, strict=True))) <= len(names)


def test_weighted_rows_are_a_seeded_sample_of_each_source(tokenizer, tmp_path: Path) -> None:
    first = sums(tmp_path / "a.jsonl", 100)
    second = sums(tmp_path / "b.jsonl", 100, offset=5)
    sources = [{"source": first, "weight": 1.0}, {"source": second, "weight": 3.0}]
    once = load(tokenizer, seed=1, sources=sources).train["prompt"]
    again = load(tokenizer, seed=1, sources=sources).train["prompt"]
    other = load(tokenizer, seed=2, sources=sources).train["prompt"]
    assert once == again
    assert once != other


def test_each_source_keeps_its_own_split_and_columns(tokenizer, tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    sums(folder / "train.jsonl", 10, note="x")
    sums(folder / "test.jsonl", 4, note="y")
    other = sums(tmp_path / "other.jsonl", 6, level="easy")
    data = load(
        tokenizer,
        sources=[
            {"source": str(folder), "split": "test", "columns": ["prompt", "answer"]},
            {"source": other, "columns": ["prompt", "answer"]},
        ],
    )
    assert len(data.train) == 10
    assert data.reward_columns == ["answer"]


def test_a_builtin_task_mixes_with_a_file(tokenizer, tmp_path: Path) -> None:
    extra = sums(tmp_path / "extra.jsonl", 5)
    data = load(
        tokenizer,
        sources=[{"source": "builtin:arithmetic"}, {"source": extra}],
        arithmetic={"num_train": 40, "num_eval": 10},
    )
    assert len(data.train) == 45


def test_sources_with_other_columns_are_named(tokenizer, tmp_path: Path) -> None:
    first = sums(tmp_path / "a.jsonl", 5)
    second = sums(tmp_path / "b.jsonl", 5, level="easy")
    message = data_error(tokenizer, sources=[{"source": first}, {"source": second}])
    assert "data.sources[1]: columns ['answer', 'level', 'prompt'] differ from data.sources[0]'s" in message
    assert "data.sources[].columns" in message


def test_column_types_are_aligned_where_they_convert(tokenizer, tmp_path: Path) -> None:
    first = write_jsonl(tmp_path / "a.jsonl", [{"prompt": "1+1=", "answer": "2"}])
    second = write_jsonl(tmp_path / "b.jsonl", [{"prompt": "2+2=", "answer": 4}])
    data = load(tokenizer, sources=[{"source": first}, {"source": second}])
    assert data.train["answer"] == ["2", "4"]


def test_a_missing_split_or_column_names_the_source_entry(tokenizer, tmp_path: Path) -> None:
    first = sums(tmp_path / "a.jsonl", 5)
    missing_split = data_error(tokenizer, sources=[{"source": first}, {"source": first, "split": "dev"}])
    assert "data.sources[1].split: no split 'dev'; the source has: train" in missing_split
    missing_column = data_error(tokenizer, sources=[{"source": first, "columns": ["prompt", "solution"]}])
    assert "data.sources[0].columns: no column 'solution'" in missing_column


def test_a_missing_source_in_a_mixture_is_named(tokenizer, tmp_path: Path) -> None:
    first = sums(tmp_path / "a.jsonl", 5)
    message = data_error(tokenizer, sources=[{"source": first}, {"source": str(tmp_path / "no.jsonl")}])
    assert message == f"{tmp_path / 'no.jsonl'}: data.sources[1].source: dataset file or folder not found"


# ----------------------------------------------------------------------------------------------------
# Hub configurations and held-out rows
# ----------------------------------------------------------------------------------------------------


def test_a_configuration_on_a_local_file_or_task_is_refused(tokenizer, tmp_path: Path) -> None:
    first = sums(tmp_path / "a.jsonl", 5)
    assert "data.config: 'main' names a hub dataset's configuration, but this is a local file" in (
        data_error(tokenizer, source=first, config="main")
    )
    assert "data.sources[0].config: 'main'" in data_error(
        tokenizer, sources=[{"source": "builtin:arithmetic", "config": "main"}]
    )


@pytest.mark.parametrize(("size", "held_out"), [(0.25, 10), (7, 7)])
def test_eval_size_holds_out_seeded_train_rows(tokenizer, tmp_path: Path, size: Any, held_out: int) -> None:
    source = sums(tmp_path / "a.jsonl", 40)
    data = load(tokenizer, seed=3, source=source, eval_size=size)
    assert len(data.eval) == held_out
    assert len(data.train) == 40 - held_out
    assert not set(data.eval["prompt"]) & set(data.train["prompt"])  # 40 distinct prompts
    assert load(tokenizer, seed=3, source=source, eval_size=size).eval["prompt"] == data.eval["prompt"]


def test_eval_size_holds_out_of_a_mixture_and_replaces_a_tasks_eval_split(tokenizer, tmp_path: Path) -> None:
    first = sums(tmp_path / "a.jsonl", 20)
    second = sums(tmp_path / "b.jsonl", 20, offset=4)
    mixed = load(tokenizer, sources=[{"source": first}, {"source": second}], eval_size=0.1)
    assert (len(mixed.train), len(mixed.eval)) == (36, 4)
    task = load(
        tokenizer, source="builtin:arithmetic", arithmetic={"num_train": 50, "num_eval": 30}, eval_size=5
    )
    assert (len(task.train), len(task.eval)) == (45, 5)


def test_eval_size_that_leaves_no_train_rows_is_named(tokenizer, tmp_path: Path) -> None:
    source = sums(tmp_path / "a.jsonl", 5)
    assert "data.eval_size: holding out 5 of 5 rows leaves no train prompts" in data_error(
        tokenizer, source=source, eval_size=5
    )


def test_a_split_can_be_a_slice_in_datasets_syntax(tokenizer, tmp_path: Path) -> None:
    """`train[:-100]` is what TRL's ppo.py trained on (it held the last 100 rows out); percentages and
    `+` work as in `datasets.load_dataset`."""
    source = sums(tmp_path / "a.jsonl", 10)
    prompts = [row["prompt"] for row in rows_of(load(tokenizer, source=source).train)]
    assert [
        r["prompt"] for r in rows_of(load(tokenizer, source=source, split="train[:-3]").train)
    ] == prompts[:-3]
    assert [
        r["prompt"] for r in rows_of(load(tokenizer, source=source, split="train[20%:40%]").train)
    ] == prompts[2:4]
    joined = load(tokenizer, source=source, split="train[:1]+train[-1:]").train
    assert [r["prompt"] for r in rows_of(joined)] == [prompts[0], prompts[-1]]
    assert "data.split: 'dev[:3]' is not a split or a slice of one" in data_error(
        tokenizer, source=source, split="dev[:3]"
    )
