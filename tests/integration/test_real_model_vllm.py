"""SmolLM2-135M-Instruct (builtin:smollm2-135m-instruct) on `generation.backend: vllm`: one update of each
algorithm with the GSM8K recipes' chat prompts, each run in a process of its own (one engine a process).

What the tiny model hides: a 49,152-token vocabulary, tied embeddings (the engine's LM head is the
embedding, pushed once), a chat template whose turns end with `<|im_end|>`, which is EOS and pad too.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.conftest import REPO, rows, run_entry, sets

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


@pytest.mark.parametrize("algorithm", ["grpo", "rloo", "ppo"])
def test_one_update_of_each_algorithm_on_smollm2_with_vllm(
    algorithm: str, gsm8k_dir: Path, tmp_path: Path
) -> None:
    output = tmp_path / "run"
    recipe = REPO / "recipes" / "gsm8k" / ("ppo.yaml" if algorithm == "ppo" else "grpo.yaml")
    overrides = [
        f"algorithm={algorithm}",
        "model.policy=builtin:smollm2-135m-instruct",
        "model.dtype=auto",
        "model.gradient_checkpointing=false",
        "training.precision=auto",
        f"data.source={gsm8k_dir}",
        "data.limit=16",
        "evaluation.every=null",
        "early_stopping.enabled=false",
        "early_stopping.metric=reward/mean",
        "generation.max_new_tokens=24",
        "generation.backend=vllm",
        "generation.vllm.kv_cache_gb=1",
        "training.per_device_batch_size=4",
        "training.gradient_accumulation_steps=1",
        "training.max_steps=1",
        "training.logging_steps=1",
        "training.warmup_ratio=0.0",
        *(
            (f"{algorithm}.num_generations=2",)
            if algorithm != "ppo"
            else ("ppo.critic_warmup_steps=0", "ppo.num_mini_batches=1")
        ),
        f"run.output_dir={output}",
        "monitoring.wandb.mode=disabled",
        "monitoring.progress=false",
    ]
    result = run_entry([f"recipes/{algorithm}.py", "--config", str(recipe), *sets(*overrides)], timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((output / "run_summary.json").read_text())
    assert (summary["status"], summary["steps"]) == ("completed", 1)
    row = rows(output)[-1]
    for key in ("reward/mean", "loss/policy", "grad_norm", "completion_length/mean"):
        assert math.isfinite(row[key]), key
    assert row["completion_length/mean"] > 1, "the engine wrote answers, not an immediate end of turn"
    assert (output / "final" / "config.json").is_file()
