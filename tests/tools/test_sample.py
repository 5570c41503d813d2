"""`llm-rl sample` over a trained embedded policy: greedy completions with their rewards, as JSON and as a table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import LLM_RL, run_entry
from tests.tools.conftest import greedy_completion

PAIRS = [(3, 4), (2, 2), (5, 1), (0, 9)]


def prompts_file(folder: Path) -> Path:
    prompts = folder / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n" for a, b in PAIRS)
    )
    return prompts


def greedy_samples(run: Path, prompts: Path, *flags: str) -> list[dict]:
    result = run_entry(
        ["sample", str(run), "--prompts", str(prompts), "--greedy", "--json", *flags], launcher=[LLM_RL]
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_sample_prints_completions_with_their_rewards(trained_run: Path, tmp_path: Path) -> None:
    prompts = prompts_file(tmp_path)
    pairs = PAIRS
    lines = greedy_samples(trained_run, prompts)
    assert [line["prompt"] for line in lines] == [f"{a}+{b}=" for a, b in pairs]
    recipe = yaml.safe_load((trained_run / "recipe.yaml").read_text())
    weights = {r["name"]: r["weight"] for r in recipe["rewards"]}
    final = trained_run / "final"
    for line, (a, b) in zip(lines, pairs, strict=True):
        assert line["completion"] == greedy_completion(
            final, f"{a}+{b}=", recipe["generation"]["max_new_tokens"]
        )
        assert line["rewards"]["accuracy"] == float(line["completion"].strip() == str(a + b))
        expected = sum(weights[name] * value for name, value in line["rewards"].items())
        assert line["reward"] == pytest.approx(expected)
    table = run_entry(["sample", str(trained_run), "--prompts", str(prompts), "--greedy"], launcher=[LLM_RL])
    assert table.returncode == 0 and "mean reward" in table.stdout
    missing = run_entry(
        ["sample", str(trained_run), "--prompts", str(tmp_path / "none.jsonl")], launcher=[LLM_RL]
    )
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


@pytest.mark.vllm
def test_sample_on_vllm_writes_what_transformers_writes(trained_run: Path, tmp_path: Path) -> None:
    """The same greedy completions and rewards from an engine started from the run's final/ (fp32 on CPU)."""
    prompts = prompts_file(tmp_path)
    on_vllm = greedy_samples(trained_run, prompts, "--backend", "vllm")
    assert on_vllm == greedy_samples(trained_run, prompts, "--backend", "hf")
    assert len(on_vllm) == len(PAIRS)
