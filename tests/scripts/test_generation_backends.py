"""scripts/generation_backends.py: one small side-by-side run prints a row per backend (measured, or skipped
with the reason where this host cannot run it), hf's ratio 1, and writes the same rows to its JSON file;
on vLLM's CPU build the vllm rows are measured, training updates included. No timing is asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_rl.generation.backends import vllm_problem
from tests.conftest import run_entry

SCRIPT = "scripts/generation_backends.py"
# The embedded model only, at a batch of 4 and 3 new tokens, one steady call a backend.
SMALL = ["--models", "tiny", "--batches", "4", "--new-tokens", "3", "--repeats", "1"]
# Two PPO updates of the embedded recipe a backend, one run each.
UPDATES = ["--updates", "tiny-ppo", "--update-steps", "2", "--update-repeats", "1"]


def run_script(tmp_path: Path, *args: str) -> tuple[dict, str]:
    """The script's JSON report and its printed output."""
    output = tmp_path / "backends.json"
    result = run_entry([SCRIPT, *args, "--json", str(output)], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(output.read_text()), result.stdout


def printed_rows(stdout: str, first_cell: str) -> list[list[str]]:
    """The cells of the printed table rows whose first cell is `first_cell`."""
    rows = [line.strip().strip("|").split("|") for line in stdout.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows if row[0].strip() == first_cell]


def check_measured(row: dict) -> None:
    """A measured generation row: positive numbers, its ratio against hf present."""
    assert row["status"] == "ok", row
    assert row["tokens_per_s"] > 0 and row["tokens_per_cpu_s"] > 0 and row["first_call_s"] > 0
    assert 1.0 <= row["tokens_a_completion"] <= 3.0, "tokens up to each stop, at most the 3 asked for"
    assert row["ratio_to_hf"] > 0 and row["cpu_ratio_to_hf"] > 0 and row["load_average"] >= 0


def check_updates(row: dict) -> None:
    """A measured training row: two PPO updates of the embedded recipe's 64 samples, read from its run."""
    assert row["status"] == "ok", row
    assert row["run"] == "tiny-ppo" and row["updates"] == 2 and row["samples_an_update"] == 64
    assert row["first_update_s"] > 0 and row["seconds_per_update"] > 0 and row["wall_s"] > 0
    assert row["load_average"] >= 0
    assert row["ratio_to_hf"] > 0 and row["ratio_range"][0] <= row["ratio_to_hf"] <= row["ratio_range"][1]


@pytest.mark.slow
def test_the_script_measures_each_backend_side_by_side_and_says_why_one_is_skipped(tmp_path: Path) -> None:
    report, stdout = run_script(tmp_path, *SMALL, *UPDATES, "--backends", "hf", "static", "vllm")
    assert {"date", "machine", "versions", "command", "seconds"} <= set(report["setting"])
    assert {"torch", "transformers", "trl", "vllm"} <= set(report["setting"]["versions"])
    rows = {row["backend"]: row for row in report["generation"]}
    assert list(rows) == ["hf", "static", "vllm"]
    assert rows["hf"]["ratio_to_hf"] == 1.0 and rows["hf"]["weight_push_s"] is None
    check_measured(rows["hf"])
    check_measured(rows["static"])
    if vllm_problem() is not None:
        assert rows["vllm"]["status"] == "skipped" and rows["vllm"]["reason"] == (
            f"generation.backend: 'vllm' cannot run on this host: {vllm_problem()}"
        )
    printed = printed_rows(stdout, "tiny")
    assert [cells[3] for cells in printed] == ["hf", "static", "vllm"], "a printed row for each backend"
    assert printed[0][4:8] == [f"{rows['hf']['start_s']:.2f}", f"{rows['hf']['first_call_s']:.2f}",
                               f"{rows['hf']['tokens_per_s']:,.0f}", "1.00"]  # fmt: skip

    updates = {row["backend"]: row for row in report["updates"]}
    assert list(updates) == ["hf", "static", "vllm"]
    check_updates(updates["hf"])
    check_updates(updates["static"])
    assert updates["hf"]["ratio_to_hf"] == 1.0
    if vllm_problem() is not None:
        assert updates["vllm"]["status"] == "skipped" and updates["vllm"]["reason"] == rows["vllm"]["reason"]
    assert [cells[1] for cells in printed_rows(stdout, "tiny-ppo")] == ["hf", "static", "vllm"]


@pytest.mark.slow
@pytest.mark.vllm
def test_on_vllms_cpu_build_vllm_generates_and_trains_beside_hf(tmp_path: Path) -> None:
    report, stdout = run_script(tmp_path, *SMALL, *UPDATES, "--backends", "hf", "vllm")
    rows = {row["backend"]: row for row in report["generation"]}
    assert list(rows) == ["hf", "vllm"]
    check_measured(rows["vllm"])
    assert rows["vllm"]["start_s"] > 0 and rows["vllm"]["weight_push_s"] > 0, "the engine's start and push"

    updates = {row["backend"]: row for row in report["updates"]}
    assert list(updates) == ["hf", "vllm"]
    for row in updates.values():
        check_updates(row)
    assert updates["hf"]["ratio_to_hf"] == 1.0
    assert [cells[1] for cells in printed_rows(stdout, "tiny-ppo")] == ["hf", "vllm"]
