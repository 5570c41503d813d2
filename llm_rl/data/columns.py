"""Checks on a dataset's columns that both where prompts come from (`sources`) and how they are
prepared (`prompts`) make, each naming the recipe key that asked for the column."""

from __future__ import annotations

from datasets import Dataset

from llm_rl.errors import DataError


def require_column(dataset: Dataset, name: str, key: str, where: str) -> None:
    """A DataError naming the missing column and the columns that exist."""
    if name not in dataset.column_names:
        existing = ", ".join(dataset.column_names)
        raise DataError(f"{key}: no column {name!r}; the dataset has: {existing}", where=where)
