"""The Prometheus sink: a running training job answers a scrape, and a port in use is bad input."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scrape(port: int) -> str | None:
    """The text of /metrics, or None while nothing listens."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            return response.read().decode()
    except OSError:
        return None


def test_a_training_run_answers_a_prometheus_scrape(tmp_path: Path) -> None:
    port = free_port()
    overrides = [
        f"run.output_dir={tmp_path}",
        "monitoring.wandb.mode=disabled",
        "monitoring.progress=false",
        f"monitoring.prometheus.port={port}",
        "training.per_device_batch_size=16",
        "grpo.num_generations=4",
        # Longer than the test waits: the scrape happens while it trains, then the test stops it.
        "training.max_steps=2000",
    ]
    command = [sys.executable, "recipes/grpo.py", *[a for o in overrides for a in ("--set", o)]]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        text = None
        while time.monotonic() < deadline and process.poll() is None:
            text = scrape(port)
            if text and "llm_rl_reward_mean{" in text:
                break
            time.sleep(0.2)
        assert text and "llm_rl_reward_mean{" in text, (
            process.stderr.read()[-3000:] if process.poll() else text
        )
        values = {
            sample.name: sample
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }
        assert values["llm_rl_reward_mean"].labels == {"run": "grpo-arithmetic", "algorithm": "grpo"}
        assert 0.0 <= values["llm_rl_reward_mean"].value <= 1.0
        assert values["llm_rl_samples"].value >= 16 and values["llm_rl_samples"].value % 16 == 0
        for name in (
            "llm_rl_entropy",
            "llm_rl_grad_norm",
            "llm_rl_reward_frac_zero_std",
            "llm_rl_samples_per_second",
        ):
            assert name in values, name
        assert "process_resident_memory_bytes" in values
    finally:
        process.kill()
        process.wait()


def test_a_prometheus_port_in_use_is_bad_input_naming_the_key(tmp_path: Path) -> None:
    from llm_rl.errors import RecipeError
    from llm_rl.monitoring.sinks import make_sinks
    from llm_rl.recipe.load import load_recipe

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        recipe = load_recipe(None, [f"monitoring.prometheus.port={port}", "monitoring.wandb.mode=disabled"])
        with pytest.raises(
            RecipeError, match=f"monitoring.prometheus.port: cannot serve on 127.0.0.1:{port}"
        ):
            make_sinks(recipe, tmp_path)
