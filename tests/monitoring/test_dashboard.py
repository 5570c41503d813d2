"""The Grafana dashboard (dashboards/llm_rl.json) against a real Prometheus scraping a live training run.

Prometheus (Debian's `prometheus` package; `.ci/run` installs it) runs on a loopback port and scrapes
the run's `monitoring.prometheus` endpoint every second. The test then asks Prometheus's HTTP API each
panel's PromQL, with the board's variables at "All", and checks that each answers with series, told
apart by run and algorithm. The GPU panels answer only where NVML does; on a host without it they must
answer nothing (absent, not zero).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from llm_rl.monitoring.gpu_health import GpuHealth
from tests.conftest import REPO
from tests.monitoring.test_sinks import free_port

DASHBOARD = REPO / "dashboards" / "llm_rl.json"
ROWS = [
    "Rewards",
    "KL and entropy",
    "Gradient norms",
    "PPO critic",
    "Throughput",
    "Memory",
    "GPU health",
    "Alerts",
]
ALL = {"$run": ".*", "$algorithm": ".*", "$job": ".*"}


def panel_queries() -> dict[str, str]:
    """Each panel's PromQL, the board's variables set to "All"."""
    board = json.loads(DASHBOARD.read_text())
    queries = {}
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in ALL.items():
                expr = expr.replace(variable, value)
            queries[panel["title"]] = expr
    return queries


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is not installed: .ci/run installs Debian's prometheus package")
        pytest.skip("prometheus is not installed (Debian package `prometheus`; .ci/run installs it)")
    return found


def query(port: int, expr: str) -> list[dict]:
    """The series an instant PromQL query answers, or [] while Prometheus is not up yet."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            answer = json.loads(response.read())
    except OSError:
        return []
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def test_the_dashboard_has_a_row_for_each_concern_and_run_and_algorithm_variables() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert [panel["title"] for panel in board["panels"] if panel["type"] == "row"] == ROWS
    variables = {variable["name"] for variable in board["templating"]["list"]}
    assert {"datasource", "run", "algorithm"} <= variables
    per_run = [expr for title, expr in panel_queries().items() if "llm_rl_" in expr and "alerts" not in expr]
    assert all('run=~".*"' in expr and 'algorithm=~".*"' in expr for expr in per_run)


def test_every_panel_answers_from_a_real_prometheus_scraping_a_live_run(tmp_path: Path) -> None:
    binary = prometheus_binary()
    trainer_port, prometheus_port = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - {{job_name: llm_rl, static_configs: [{{targets: ['127.0.0.1:{trainer_port}']}}]}}\n"
    )
    prometheus = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prometheus_port}"],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("w"),
    )  # fmt: skip
    overrides = [
        f"run.output_dir={tmp_path / 'run'}", "monitoring.wandb.mode=disabled", "monitoring.progress=false",
        f"monitoring.prometheus.port={trainer_port}",
        "monitoring.alerts.grad_norm.above=1e-6",  # an alert fires every update, so its panel has data
        "training.max_steps=5000",  # longer than the test waits: it stops the run itself
    ]  # fmt: skip
    trainer = subprocess.Popen(
        [sys.executable, "recipes/ppo.py", *[part for o in overrides for part in ("--set", o)]],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    queries = panel_queries()
    gpu = {title for title, expr in queries.items() if "llm_rl_gpu_" in expr}
    expected = set(queries) - (set() if GpuHealth().handles else gpu)
    answers: dict[str, list[dict]] = {}
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and trainer.poll() is None:
            answers = {title: query(prometheus_port, expr) for title, expr in queries.items()}
            if all(answers[title] for title in expected):
                break
            time.sleep(1)
        assert trainer.poll() is None, trainer.stderr.read()[-3000:]
        silent = sorted(title for title in expected if not answers.get(title))
        assert not silent, (
            f"panels without series: {silent}\n{(tmp_path / 'prometheus.log').read_text()[-2000:]}"
        )
        for title in expected - {"Process resident memory"}:
            for series in answers[title]:
                assert series["metric"]["run"] == "ppo-arithmetic", title
                assert series["metric"]["algorithm"] == "ppo", title
        if not GpuHealth().handles:
            assert all(answers[title] == [] for title in gpu), "GPU panels show data without a GPU"
        alert_names = {series["metric"]["alert"] for series in answers["Alerts fired (last 5 min)"]}
        assert "grad_norm" in alert_names
    finally:
        trainer.kill()
        prometheus.terminate()
        trainer.wait()
        prometheus.wait(timeout=30)
