"""`llm-rl serve` over a trained embedded policy: health, greedy generation equal to transformers', batching,
and bad requests answered with a 4xx that says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.tools.conftest import greedy_completion

SERVE_LIMITS = ["--max-prompts", "4", "--max-prompt-tokens", "16", "--max-new-tokens", "8"]


@contextmanager
def running_server(source: Path, *options: str, env: dict[str, str] | None = None, stderr=subprocess.DEVNULL):
    """`llm-rl serve SOURCE --port 0 OPTIONS` from this checkout (`python -m llm_rl.cli`, run in the repo,
    imports its llm_rl); yields the base URL it prints."""
    command = [sys.executable, "-m", "llm_rl.cli", "serve", str(source), "--port", "0", *options]
    process = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=stderr, text=True, env={**os.environ, **(env or {})}
    )
    try:
        # Libraries may print a line or two before the server's own.
        line = ""
        for _ in range(20):
            line = process.stdout.readline()
            if " on http://127.0.0.1:" in line or not line:
                break
        assert " on http://127.0.0.1:" in line, line
        yield line.split(" on ", 1)[1].split()[0]
    finally:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def server(trained_run: Path):
    """`llm-rl serve` on a free loopback port, with small limits; yields its base URL."""
    with running_server(trained_run, "--batch-wait-ms", "300", *SERVE_LIMITS) as url:
        yield url


def call(url: str, path: str, body: bytes | dict | None = None) -> tuple[int, dict]:
    """(status, JSON answer) of a GET (no body) or POST."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_serve_answers_health_and_generate_requests(server: str, trained_run: Path) -> None:
    status, health = call(server, "/health")
    assert status == 200 and health["status"] == "ok"
    assert health["model"] == str(trained_run / "final")
    status, answer = call(server, "/generate", {"prompt": "3+4=", "temperature": 0, "max_new_tokens": 6})
    assert status == 200
    [completion] = answer["completions"]
    assert completion["text"] == greedy_completion(trained_run / "final", "3+4=", 6)
    assert completion["finish_reason"] in ("eos", "length") and 1 <= completion["tokens"] <= 6
    status, sampled = call(server, "/generate", {"prompts": ["1+2=", "5+3="], "max_new_tokens": 4})
    assert status == 200 and len(sampled["completions"]) == 2


def test_serve_batches_requests_that_arrive_together(server: str, trained_run: Path) -> None:
    prompts = [f"{a}+{b}=" for a, b in [(1, 2), (3, 3), (4, 1), (2, 6), (5, 2), (7, 1)]]
    with ThreadPoolExecutor(len(prompts)) as pool:
        answers = list(
            pool.map(
                lambda p: call(server, "/generate", {"prompt": p, "temperature": 0, "max_new_tokens": 4}),
                prompts,
            )
        )
    assert all(status == 200 for status, _ in answers)
    final = trained_run / "final"
    for prompt, (_, answer) in zip(prompts, answers, strict=True):
        assert answer["completions"][0]["text"] == greedy_completion(final, prompt, 4), prompt
    _, health = call(server, "/health")
    assert health["largest_batch"] > 1


BAD_REQUESTS = {
    "not json": (b"{nope", 400, "not JSON"),
    "unknown key": ({"prompt": "1+1=", "temprature": 0}, 400, "unknown key 'temprature'"),
    "both prompt and prompts": ({"prompt": "1+1=", "prompts": ["2+2="]}, 400, "give one of"),
    "no prompt": ({"max_new_tokens": 2}, 400, "give one of"),
    "empty prompt": ({"prompt": ""}, 400, "prompt 0: must be text"),
    "too many prompts": ({"prompts": ["1+1="] * 5}, 400, "5 prompts in one request; the limit is 4"),
    "too many new tokens": ({"prompt": "1+1=", "max_new_tokens": 9}, 400, "the limit is 8"),
    "prompt too long": ({"prompt": "1+1=" * 10}, 400, "a prompt of"),
    "bad temperature": ({"prompt": "1+1=", "temperature": "hot"}, 400, "'temperature' must be a number"),
    "body too large": (b"x" * (2 << 20), 413, "the limit is 1048576"),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_serve_answers_bad_requests_with_a_4xx_that_says_why(server: str, case: str) -> None:
    body, expected_status, message = BAD_REQUESTS[case]
    status, answer = call(server, "/generate", body)
    assert status == expected_status
    assert message in answer["error"]


def test_serve_answers_404_for_unknown_endpoints_and_405_for_wrong_methods(server: str) -> None:
    status, answer = call(server, "/nope")
    assert status == 404 and answer["error"]["code"] == "not_found"
    assert call(server, "/health", {"prompt": "x"})[0] == 405
