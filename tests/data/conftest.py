"""What the data tests share: the tiny model's character-level tokenizer, and loading a data section through it."""

from __future__ import annotations

import re
from typing import Any

import pytest
from datasets import Dataset

from llm_rl.data.prompts import PromptData, load_prompt_data
from llm_rl.errors import DataError, UserInputError
from llm_rl.models.tiny import build_tokenizer
from llm_rl.schema import DataSection

SUM = re.compile(r"^(\d+)\+(\d+)=$")


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def load(tokenizer, seed: int = 0, **data: Any) -> PromptData:
    return load_prompt_data(DataSection(**data), tokenizer, seed)


def data_error(tokenizer, **data: Any) -> str:
    """The message of the DataError that loading raises."""
    with pytest.raises(DataError) as caught:
        load(tokenizer, **data)
    assert isinstance(caught.value, UserInputError)
    return str(caught.value)


def rows_of(dataset: Dataset) -> list[dict[str, Any]]:
    return [dict(row) for row in dataset]


def small_arithmetic(**settings: Any) -> dict[str, Any]:
    return {"source": "builtin:arithmetic", "arithmetic": {"num_train": 60, "num_eval": 20, **settings}}
