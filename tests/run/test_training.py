"""The training run (llm_rl.run.training): the settings it takes for speed on the host it runs on."""

from __future__ import annotations

import os

import pytest
import torch

from llm_rl.run.training import serial_tokenizers_on_cpu


@pytest.mark.parametrize("preset", [None, "true"])
def test_training_on_cpu_tokenizes_serially_unless_the_environment_says(
    monkeypatch: pytest.MonkeyPatch, preset: str | None
) -> None:
    if torch.accelerator.is_available():
        pytest.skip("only a CPU-only host turns the tokenizers thread pool off")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", preset or "")  # restored after the test, set or not
    if preset is None:
        monkeypatch.delenv("TOKENIZERS_PARALLELISM")
    serial_tokenizers_on_cpu()
    assert os.environ["TOKENIZERS_PARALLELISM"] == (preset or "false")
