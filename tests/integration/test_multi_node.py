"""Several machines, rehearsed on one host: two `accelerate launch` commands with `--num_machines 2` and
their own `--machine_rank`, meeting at 127.0.0.1, give the metric rows of one machine with the same total
processes; and `scripts/slurm/llm_rl.sbatch` runs as written, with `srun` and `scontrol` replaced by
stand-ins that start one launcher per node on this host.

Each launch is one CPU process per machine over gloo, 10-20 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import ACCELERATE_LAUNCH, REPO, entry, rows

CONFIGS = {name: str(REPO / "accelerate_configs" / f"cpu_{name}_2proc.yaml") for name in ("ddp", "zero2")}
SBATCH = REPO / "scripts" / "slurm" / "llm_rl.sbatch"
PORT = ACCELERATE_LAUNCH[ACCELERATE_LAUNCH.index("--main_process_port") + 1]
COMPARED = ("samples", "reward/mean", "loss/policy", "grad_norm")
TWO_STEPS = ["training.per_device_batch_size=8", "training.max_steps=2"]


def machine_command(config: str, rank: int, algorithm: str, run: Path) -> list[str]:
    """The launch one of two machines runs: one process of two, rank 0's machine at 127.0.0.1."""
    machines = ["--num_machines", "2", "--machine_rank", str(rank), "--num_processes", "2"]
    rendezvous = ["--main_process_ip", "127.0.0.1", "--deepspeed_multinode_launcher", "standard"]
    return [
        *ACCELERATE_LAUNCH,
        "--config_file",
        config,
        *machines,
        *rendezvous,
        *entry(algorithm, run, *TWO_STEPS),
    ]


def finished(process: subprocess.Popen) -> str:
    output, _ = process.communicate(timeout=400)
    assert process.returncode == 0, output[-3000:]
    return output


@pytest.mark.slow
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("algorithm", ["grpo", "rloo", "ppo"])
def test_two_machines_give_the_rows_of_one(tmp_path: Path, config: str, algorithm: str) -> None:
    one = tmp_path / "one_machine"
    single = [*ACCELERATE_LAUNCH, "--config_file", CONFIGS[config], *entry(algorithm, one, *TWO_STEPS)]
    result = subprocess.run(single, cwd=REPO, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]

    two = tmp_path / "two_machines"
    machines = [
        subprocess.Popen(
            machine_command(CONFIGS[config], rank, algorithm, two),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [finished(machine) for machine in machines]
    assert "completed: 2 steps, 32 samples" in outputs[0]
    assert "completed:" not in outputs[1], "the second machine writes nothing of the run's own"
    assert json.loads((two / "run_summary.json").read_text())["status"] == "completed"
    for a, b in zip(rows(one), rows(two), strict=True):
        assert [b[key] for key in COMPARED] == pytest.approx([a[key] for key in COMPARED], rel=1e-5, abs=1e-7)


def stand_ins(folder: Path) -> dict[str, str]:
    """`srun` and `scontrol` for one host: srun starts its command once per node, each with its node id."""
    folder.mkdir()
    (folder / "srun").write_text(
        "#!/bin/bash\n"
        'while [[ "$1" == --* ]]; do shift; done\n'
        "pids=()\n"
        "for ((node = 0; node < SLURM_NNODES; node++)); do\n"
        '    SLURM_NODEID=$node SLURM_PROCID=$node "$@" &\n'
        "    pids+=($!)\n"
        "done\n"
        "status=0\n"
        'for pid in "${pids[@]}"; do wait "$pid" || status=$?; done\n'
        "exit $status\n"
    )
    (folder / "scontrol").write_text(
        "#!/bin/bash\n"
        'case "$1 $2" in\n'
        '    "show hostnames") for ((node = 0; node < SLURM_NNODES; node++)); do echo 127.0.0.1; done ;;\n'
        '    "requeue "*) echo "$2" >> "$REQUEUED" ;;\n'
        "esac\n"
    )
    for name in ("srun", "scontrol"):
        (folder / name).chmod(0o755)
    return {
        "PATH": f"{folder}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "SLURM_NNODES": "2",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "node[1-2]",
        "REQUEUED": str(folder / "requeued"),
    }


@pytest.mark.slow
def test_the_slurm_file_runs_two_nodes_and_requeues_a_preempted_job(tmp_path: Path) -> None:
    run = tmp_path / "run"
    env = {
        **os.environ,
        **stand_ins(tmp_path / "bin"),
        "RUN_DIR": str(run),
        "ACCELERATE_CONFIG": CONFIGS["ddp"],
        "PROCESSES_PER_NODE": "1",
        "MAIN_PORT": PORT,
    }
    budget = 12
    job = [
        "bash",
        str(SBATCH),
        *entry(
            "ppo", tmp_path / "overridden", "training.per_device_batch_size=8", f"training.max_steps={budget}"
        ),
    ]
    first = subprocess.Popen(
        job, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
        assert first.poll() is None and time.monotonic() < deadline, "the job ended or stalled early"
        time.sleep(0.05)
    # Slurm's `--signal=USR1@120` reaches the job step's processes, not the batch shell.
    launchers = [
        process
        for process in psutil.Process(first.pid).children(recursive=True)
        if any(part.endswith("accelerate") for part in process.cmdline()[:2])
    ]
    assert len(launchers) == 2, "one launcher per node"
    for launcher in launchers:
        launcher.send_signal(signal.SIGUSR1)
    output, _ = first.communicate(timeout=120)
    assert first.returncode == 0, output[-3000:]
    assert "preempted: requeueing job 4242" in output
    assert (tmp_path / "bin" / "requeued").read_text().split() == ["4242"]
    summary = json.loads((run / "run_summary.json").read_text())
    assert summary["status"] == "preempted" and summary["steps"] < budget
    assert not (tmp_path / "overridden").exists(), "RUN_DIR is the run folder"

    requeued = subprocess.run(job, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    assert requeued.returncode == 0, requeued.stdout[-3000:] + requeued.stderr[-3000:]
    assert json.loads((run / "run_summary.json").read_text())["status"] == "completed"
    assert [row["step"] for row in rows(run)] == list(range(1, budget + 1))
