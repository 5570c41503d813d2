"""scripts/gpu_check.py: refuses without a GPU unless asked; orders its work most important first;
estimates a run from those done; kills a run at the budget with what it started; and on a CPU, within
a small budget, prints a table and writes the same numbers to its JSON file, ending cleanly."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, run_entry

sys.path.insert(0, str(REPO / "scripts"))

import gpu_check  # noqa: E402
from gpu_check import Job, Record, estimate_seconds, kv_cache_gb, run_until, trl_pairs, work_order  # noqa: E402

from llm_rl.generation.backends import vllm_problem  # noqa: E402

SCRIPT = "scripts/gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_refuses_without_a_gpu(tmp_path: Path) -> None:
    result = run_entry([SCRIPT, "--output", str(tmp_path / "out.json")], timeout=60)
    assert result.returncode == 2
    assert "no CUDA GPU" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out.json").exists()


def test_work_order_puts_the_default_backend_of_the_first_size_first() -> None:
    jobs = work_order(["150m", "1.2b"], ["auto", "static", "paged"], ["grpo", "ppo", "rloo"], trl=True)
    names = [job.name for job in jobs]
    assert names[:2] == ["150m-grpo-ours-auto", "150m-ppo-ours-auto"]
    assert names[2:6] == ["150m-grpo-ours-static", "150m-ppo-ours-static", "150m-grpo-ours-paged",
                          "150m-ppo-ours-paged"]  # fmt: skip
    assert names[6:9] == ["1.2b-grpo-ours-auto", "1.2b-ppo-ours-auto", "150m-grpo-trl-auto"]
    assert names.index("1.2b-grpo-ours-static") > names.index("150m-grpo-trl-auto")
    assert len(names) == len(set(names)) == 2 * 3 * 2 + 1 + 3, "every job once"
    assert [j.name for j in work_order(["tiny"], ["auto"], ["ppo"], trl=True)] == ["tiny-ppo-ours-auto"]


def test_vllm_runs_with_the_other_backends_but_not_on_trls_side_and_gets_a_kv_cache_for_its_batch() -> None:
    names = [job.name for job in work_order(["150m", "1.2b"], ["auto", "static", "vllm"], ["grpo"], trl=True)]
    assert names[:3] == ["150m-grpo-ours-auto", "150m-grpo-ours-static", "150m-grpo-ours-vllm"]
    assert "1.2b-grpo-ours-vllm" in names and "150m-grpo-trl-static" in names
    assert not any(name.endswith("grpo-trl-vllm") for name in names), "TRL by hand would not use our engine"
    # Twice the batch's 64 x (16 + 128) tokens: 0.84 GiB of bf16 keys and values at 150M, 3.4 GiB at 1.2B.
    args = argparse.Namespace(batch=64, new_tokens=128)
    assert [kv_cache_gb(size, args, on_gpu=True) for size in ("150m", "1.2b", "tiny")] == [1, 4, 1]
    model = Path("/models/150m")
    overrides = gpu_check.job_overrides(Job("150m", "ppo-ours", "vllm"), model, args, on_gpu=True)
    assert "generation.backend=vllm" in overrides and "generation.vllm.kv_cache_gb=1" in overrides
    assert not any(
        "kv_cache" in o for o in gpu_check.job_overrides(Job("150m", "ppo-ours", "auto"), model, args, True)
    )


def done(size: str, side: str, backend: str, wall: float, step: float) -> Record:
    return Record(Job(size, side, backend), "ok", wall_seconds=wall, numbers={"seconds_per_step": step})


def test_estimate_comes_from_the_most_alike_runs_and_scales_with_parameters() -> None:
    job = Job("big", "grpo-ours", "auto")
    parameters = {"small": 100, "big": 800}
    assert estimate_seconds(job, [], steps=6, parameters=parameters) is None
    # Only another size has run: its start-up (20 - 5 x 2 = 10 s) and 5 steady updates 8 times longer.
    small = done("small", "grpo-ours", "auto", wall=20.0, step=2.0)
    assert estimate_seconds(job, [small], 6, parameters) == pytest.approx(10 + 5 * 2 * 8)
    # A run of the same size and backend counts before it, and a failed run counts for nothing.
    same_size = done("big", "ppo-ours", "auto", wall=50.0, step=5.0)
    failed = Record(Job("big", "grpo-ours", "auto"), "failed")
    assert estimate_seconds(job, [small, same_size, failed], 6, parameters) == pytest.approx(50.0)


def test_trl_pairs_compare_our_grpo_with_trls_on_the_same_size_and_backend() -> None:
    def side(side: str, backend: str, step: float, memory: float) -> Record:
        numbers = {"seconds_per_step": step, "cpu_seconds_per_step": step, "peak_memory_mb": memory}
        return Record(Job("150m", side, backend), "ok", numbers=numbers)

    records = [side("grpo-ours", "auto", 1.1, 900.0), side("grpo-ours", "static", 0.5, 800.0),
               side("grpo-trl", "auto", 1.0, 1000.0), side("grpo-trl", "paged", 2.0, 1000.0)]  # fmt: skip
    (pair,) = trl_pairs(records)  # static has no TRL side, paged none of ours
    assert pair["backend"] == "auto (hf)"
    assert pair["wall_time_ratio"] == pytest.approx(1.1) and pair["memory_ratio"] == pytest.approx(0.9)
    assert "**1.100**" in pair["row"] and pair["row"].startswith("| GRPO 150m auto (hf) | 1000.0 | 1100.0 |")


def test_a_run_past_its_deadline_is_killed_with_the_processes_it_started_and_exit_2_is_a_refusal() -> None:
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    started = time.monotonic()
    status, stdout, _ = run_until([sys.executable, "-c", code], time.monotonic() + 3, gpu_check.worker_env())
    assert status == "killed"
    assert time.monotonic() - started < 15
    child = Path(f"/proc/{int(stdout.split()[0])}/status")
    time.sleep(0.5)
    assert not child.exists() or "zombie" in child.read_text(), "the run's own child is killed too"
    assert run_until([sys.executable, "-c", "print('x')"], time.monotonic() + 60, {})[:2] == ("ok", "x\n")
    assert run_until([sys.executable, "-c", "raise SystemExit(2)"], time.monotonic() + 60, {})[0] == "refused"
    assert run_until([sys.executable, "-c", "raise SystemExit(1)"], time.monotonic() + 60, {})[0] == "failed"


def table_rows(stdout: str) -> dict[str, list[str]]:
    """The final table's rows by `size algorithm backend`: their cells."""
    lines = stdout.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("| size | algorithm |"))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[" ".join(cells[:3])] = cells[3:]
    return rows


BUDGET = 45


def test_cpu_run_fills_the_table_and_json_and_ends_within_its_budget(tmp_path: Path) -> None:
    output = tmp_path / "check.json"
    args = [SCRIPT, "--allow-cpu", "--sizes", "tiny", "small", "--backends", "auto", "static", "vllm",
            "--steps", "3", "--new-tokens", "8", "--batch", "16", "--budget", str(BUDGET),
            "--output", str(output), "--work", str(tmp_path / "runs")]  # fmt: skip
    started = time.monotonic()
    result = run_entry(args, timeout=BUDGET + 120)
    seconds = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    assert seconds < BUDGET + 30, "the budget ends the check"

    report = json.loads(output.read_text())
    assert report["command"].startswith("python ") and "--budget" in report["command"]
    assert {"torch", "transformers", "trl", "python"} <= set(report["versions"])
    assert report["copy_bandwidth_gb_per_second"] > 0.1
    runs = {f"{r['size']} {r['algorithm']} {r['backend']}": r for r in report["runs"]}
    assert len(runs) == len(
        work_order(["tiny", "small"], ["auto", "static", "vllm"], list(gpu_check.ALGORITHMS), True)
    )
    assert any(r["status"] == "not run" for r in runs.values()), "the small budget stops the work early"
    assert report["elapsed_seconds"] <= BUDGET

    rows = table_rows(result.stdout)
    assert set(rows) == set(runs), "the table lists every job, run or not"
    if vllm_problem() is not None:
        vllm_runs = [run for name, run in runs.items() if name.endswith(" vllm")]
        assert vllm_runs and all(run["status"] == "skipped" for run in vllm_runs), (
            "skipped, whatever the budget"
        )
        assert all(run["detail"] == vllm_problem() for run in vllm_runs)
        assert rows["tiny grpo-ours vllm"][-1] == f"skipped: {vllm_problem()}"
    for name in ("tiny grpo-ours auto (hf)", "tiny ppo-ours auto (hf)"):
        run = runs[name]
        assert run["status"] == "ok", run
        # EOS held back: completions run to --new-tokens, so tokens/s is samples/s x 8.
        assert run["completion_tokens"] == pytest.approx(8.0)
        assert run["tokens_per_second"] == pytest.approx(8 * run["samples_per_second"])
        bound = report["models"]["tiny"]["decode_bound_tokens_per_second"]
        assert run["share_of_decode_bound"] == pytest.approx(run["tokens_per_second"] / bound)
        assert 0 < run["share_of_decode_bound"] < 1
        assert run["peak_memory_gb"] > 0 and run["plan_gb"] > 0
        cells = rows[name]
        assert float(cells[0]) == pytest.approx(run["samples_per_second"], abs=0.06), "table and JSON agree"
        assert cells[3] == f"{run['share_of_decode_bound']:.2%}"
        assert cells[-1] == "ok"


@pytest.mark.gpu
def test_gpu_check_on_a_gpu(tmp_path: Path) -> None:
    output = tmp_path / "check.json"
    result = run_entry([SCRIPT, "--output", str(output)], timeout=600, launcher=[sys.executable])
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report["elapsed_seconds"] <= 480
    first = report["runs"][0]
    assert first["status"] == "ok" and first["share_of_decode_bound"] > 0
