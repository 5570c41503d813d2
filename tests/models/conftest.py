"""What the model tests share: the embedded tiny model's folder, built once per cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_rl.models.tiny import tiny_model_path


@pytest.fixture(scope="module")
def tiny_path() -> Path:
    return tiny_model_path()
