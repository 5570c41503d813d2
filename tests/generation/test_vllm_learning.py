"""The embedded default learns on vLLM as it does on transformers: each algorithm's whole default recipe
(`recipes/<algorithm>.py`, its own budget) with `generation.backend: vllm`, and the mean reward of the last
20% of logging rows at least 0.30 above the first 20%'s, the bar the hf backend clears (measured on both
backends side by side: docs/benchmarks.md, "Learning on vLLM").

Marked `vllm` and `slow`: a minute or two per algorithm on 2 CPU cores.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_rl.monitoring.metrics import first_and_last_mean
from tests.conftest import ALGORITHMS, rows, run_entry, sets
from tests.generation.conftest import VLLM

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

# The rise of reward the embedded default shows on every backend and algorithm.
RISE = 0.30


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_embedded_default_learns_on_vllm(tmp_path: Path, algorithm: str) -> None:
    run = tmp_path / "run"
    overrides = [
        f"run.output_dir={run}",
        "monitoring.wandb.mode=disabled",
        "monitoring.progress=false",
        *VLLM,
    ]
    result = run_entry([f"recipes/{algorithm}.py", *sets(*overrides)], timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    first, last = first_and_last_mean(rows(run))
    assert last - first >= RISE, f"reward {first:.3f} -> {last:.3f}"
