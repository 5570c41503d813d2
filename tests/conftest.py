"""Shared test set-up: offline hub and wandb, one tiny-model cache for the whole suite and its subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GSM8K = REPO.parent / "shared" / "data" / "gsm8k"

os.environ.setdefault("LLM_RL_CACHE", str(REPO / ".pytest_cache" / "llm_rl"))
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["WANDB_MODE"] = "offline"
os.environ["WANDB_SILENT"] = "true"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def run_entry(
    args: list[str], timeout: float = 300, launcher: list[str] | None = None
) -> subprocess.CompletedProcess:
    """Run a repo script (e.g. `recipes/grpo.py ...`) in a fresh process, as a user would."""
    command = (launcher or [sys.executable]) + args
    return subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=os.environ.copy()
    )


@pytest.fixture(scope="session")
def gsm8k_dir() -> Path:
    if not (GSM8K / "test.jsonl").exists():
        pytest.skip(f"GSM8K data not found at {GSM8K}")
    return GSM8K


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` are skipped, with the reason, where torch sees no CUDA device."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; this machine has none")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
