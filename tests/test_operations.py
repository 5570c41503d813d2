"""Operations: `llm-rl doctor` on crafted metric files (one per finding, and a healthy run with none),
`llm-rl export` of full, PPO and LoRA policies, a Prometheus scrape of a running job, and
`llm-rl serve` / `llm-rl sample` over a trained embedded policy."""

from __future__ import annotations

import json
import math
import random
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import yaml
from conftest import REPO, run_entry
from prometheus_client.parser import text_string_to_metric_families
from safetensors.torch import load_file
from test_migration import short_grpo_run

from llm_rl.tools.doctor import diagnose

LLM_RL = str(Path(sys.executable).parent / "llm-rl")
ROWS = 100


def healthy_row(step: int, rng: random.Random, algorithm: str) -> dict:
    """A run that learns: reward rising with noise, KL small, grad norm under 1, entropy easing off."""
    progress = step / ROWS
    row = {
        "step": step,
        "samples": 64 * step,
        "reward/mean": 0.2 + 0.6 * progress + rng.gauss(0, 0.04),
        "reward/std": 0.3,
        "kl": 0.02 + 0.01 * progress + abs(rng.gauss(0, 0.005)),
        "grad_norm": 0.5 + rng.random() * 0.3,
        "entropy": 1.0 - 0.3 * progress,
        "completion_length/mean": 20 + rng.random() * 4,
        "samples_per_second": 100 + rng.gauss(0, 5),
    }
    if algorithm == "grpo":
        row["reward/frac_zero_std"] = 0.1
        row["completion_length/clipped_ratio"] = 0.02
    else:
        row["value/explained_variance"] = 0.5
    return row


# Each case: (algorithm, how a healthy row is changed, the finding it must produce).
CASES = {
    "grpo groups without spread": (
        "grpo",
        lambda row, p: {**row, "reward/mean": 0.1 + 0.01 * math.sin(p * 20), "reward/frac_zero_std": 0.9},
        ("reward flat", "frac_zero_std"),
    ),
    "ppo critic lagging": (
        "ppo",
        lambda row, p: {**row, "reward/mean": 0.3, "value/explained_variance": -0.2},
        ("reward flat", "critic lags"),
    ),
    "ppo critic fitting too fast": (
        "ppo",
        lambda row, p: {**row, "reward/mean": 0.3, "value/explained_variance": 0.99},
        ("reward flat", "leaving advantages near 0"),
    ),
    "reward swinging": (
        "grpo",
        lambda row, p: {**row, "reward/mean": 0.2 + 0.6 * p + 0.5 * math.sin(p * 2 * math.pi * 5)},
        ("reward swinging", "fell back"),
    ),
    "kl drifting": (
        "ppo",
        lambda row, p: {**row, "kl": 0.02 + 2.0 * p * p},
        ("KL drifting up", "ppo.kl_coef"),
    ),
    "grad norm high": (
        "grpo",
        lambda row, p: {**row, "grad_norm": 3.0 if p > 0.4 else 0.5},
        ("grad norm high", "above 1"),
    ),
    "entropy collapsing": (
        "grpo",
        lambda row, p: {**row, "entropy": max(0.05, 1.0 - 5 * p)},
        ("entropy collapsing early", "by step"),
    ),
    "completions truncated": (
        "grpo",
        lambda row, p: {**row, "completion_length/clipped_ratio": 0.6},
        ("completions truncated", "length limit"),
    ),
    "throughput falling": (
        "ppo",
        lambda row, p: {**row, "samples_per_second": 100 * (1 - 0.6 * p)},
        ("throughput falling", "samples_per_second"),
    ),
}


def write_run(folder: Path, algorithm: str, change=None) -> Path:
    rng = random.Random(0)
    folder.mkdir(parents=True)
    rows = [healthy_row(step, rng, algorithm) for step in range(1, ROWS + 1)]
    if change is not None:
        rows = [change(row, row["step"] / ROWS) for row in rows]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    recipe = {
        "algorithm": algorithm,
        "generation": {"max_new_tokens": 64},
        "training": {"max_grad_norm": 1.0},
    }
    (folder / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    return folder


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_a_healthy_run_has_no_findings(tmp_path: Path, algorithm: str) -> None:
    findings, rows = diagnose(write_run(tmp_path / "run", algorithm))
    assert rows == ROWS and findings == []


@pytest.mark.parametrize("case", list(CASES))
def test_each_problem_is_named_with_its_evidence(tmp_path: Path, case: str) -> None:
    algorithm, change, (name, words) = CASES[case]
    findings, _ = diagnose(write_run(tmp_path / "run", algorithm, change))
    assert [f.name for f in findings] == [name], [(f.name, f.evidence) for f in findings]
    assert words in findings[0].evidence + findings[0].advice


def test_a_staged_run_is_judged_stage_by_stage(tmp_path: Path) -> None:
    """A fast healthy GRPO stage, then a PPO stage at half its throughput whose KL drifts up."""
    rng = random.Random(1)
    grpo_rows = [
        {**healthy_row(step, rng, "grpo"), "stage": 0, "samples_per_second": 200.0} for step in range(1, 101)
    ]
    ppo_rows = [
        {
            **healthy_row(step, rng, "ppo"),
            "step": 100 + step,
            "stage": 1,
            "kl": 0.02 + 2.0 * (step / 100) ** 2,
        }
        for step in range(1, 101)
    ]
    run = tmp_path / "staged"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in grpo_rows + ppo_rows))
    stages = [{"name": "grpo", "max_steps": 100}, {"name": "ppo", "max_steps": 100}]
    (run / "recipe.yaml").write_text(yaml.safe_dump({"algorithm": "grpo", "stages": stages}))
    for index, (stage, algorithm) in enumerate(zip(stages, ["grpo", "ppo"], strict=True)):
        folder = run / "stages" / f"{index:02d}-{stage['name']}"
        folder.mkdir(parents=True)
        (folder / "recipe.yaml").write_text(yaml.safe_dump({"algorithm": algorithm}))
    findings, rows = diagnose(run)
    assert rows == 200
    assert [f.name for f in findings] == ["stage 01-ppo: KL drifting up"]
    assert "ppo.kl_coef" in findings[0].advice


def test_doctor_command(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", "ppo", CASES["kl drifting"][1])
    result = run_entry(["doctor", str(run)], launcher=[LLM_RL], timeout=60)
    assert result.returncode == 0, result.stderr
    assert "KL drifting up" in result.stdout and "try: " in result.stdout
    missing = run_entry(["doctor", str(tmp_path / "nope")], launcher=[LLM_RL], timeout=60)
    assert (
        missing.returncode == 2 and "not a run folder" in missing.stderr and "Traceback" not in missing.stderr
    )


def test_a_short_run_is_too_short_to_judge(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "samples": 8, "reward/mean": 0.1}) + "\n")
    result = run_entry(["doctor", str(run)], launcher=[LLM_RL], timeout=60)
    assert "too few to judge" in result.stdout


# --------------------------------------------------------------------------------------------------
# export
# --------------------------------------------------------------------------------------------------


def export(*args: str) -> None:
    result = run_entry(["export", *args], launcher=[LLM_RL], timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]


def test_export_writes_the_policy_in_the_dtype_asked(tmp_path: Path) -> None:
    final = short_grpo_run(tmp_path / "grpo")
    export(str(tmp_path / "grpo"), "--dtype", "bf16", "-o", str(tmp_path / "out"))
    written, trained = (
        load_file(tmp_path / "out" / "model.safetensors"),
        load_file(final / "model.safetensors"),
    )
    assert written.keys() == trained.keys()
    for name, tensor in trained.items():
        assert written[name].dtype == torch.bfloat16
        torch.testing.assert_close(written[name], tensor.to(torch.bfloat16), rtol=0, atol=0)
    assert (tmp_path / "out" / "tokenizer.json").exists()
    again = run_entry(
        ["export", str(tmp_path / "grpo"), "-o", str(tmp_path / "out")], launcher=[LLM_RL], timeout=120
    )
    assert again.returncode == 2 and "not empty" in again.stderr


def test_export_of_a_lora_run_keeps_or_merges_the_adapter(tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    final = short_grpo_run(tmp_path / "grpo", "model.lora.enabled=true", "model.lora.r=4")
    export(str(final), "-o", str(tmp_path / "adapter"))
    assert (tmp_path / "adapter" / "adapter_config.json").exists() and not (
        tmp_path / "adapter" / "config.json"
    ).exists()
    export(str(final), "--merge-lora", "--dtype", "fp32", "-o", str(tmp_path / "merged"))
    base = json.loads((final / "adapter_config.json").read_text())["base_model_name_or_path"]
    expected = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base), str(final)
    ).merge_and_unload()
    written = load_file(tmp_path / "merged" / "model.safetensors")
    for name, tensor in expected.state_dict().items():
        torch.testing.assert_close(written[name], tensor, rtol=0, atol=0, msg=name)


# ----------------------------------------------------------------------------------------------------
# Prometheus
# ----------------------------------------------------------------------------------------------------


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
        assert values["llm_rl_reward_mean"].labels == {"run": "grpo-arithmetic"}
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


# ----------------------------------------------------------------------------------------------------
# Serving and sampling a trained embedded policy
# ----------------------------------------------------------------------------------------------------

SERVE_LIMITS = ["--max-prompts", "4", "--max-prompt-tokens", "16", "--max-new-tokens", "8"]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("trained") / "grpo"
    short_grpo_run(folder)
    return folder


@pytest.fixture(scope="module")
def server(trained_run: Path):
    """`llm-rl serve` on a free loopback port, with small limits; yields its base URL."""
    command = [LLM_RL, "serve", str(trained_run), "--port", "0", "--batch-wait-ms", "300", *SERVE_LIMITS]
    process = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
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


def call(url: str, path: str, body: bytes | dict | None = None) -> tuple[int, dict]:
    """(status, JSON answer) of a GET (no body) or POST."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def greedy_completion(final: Path, prompt: str, max_new_tokens: int) -> str:
    """What transformers' own generate writes for a prompt, greedily, up to EOS."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(final)
    assert not tokenizer.chat_template, "the embedded tokenizer is expected to have no chat template"
    model = AutoModelForCausalLM.from_pretrained(final).eval()
    ids = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **ids, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id
        )
    response = out[0, ids["input_ids"].shape[1] :].tolist()
    if tokenizer.eos_token_id in response:
        response = response[: response.index(tokenizer.eos_token_id)]
    return tokenizer.decode(response, skip_special_tokens=True)


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


def test_serve_answers_404_for_unknown_endpoints(server: str) -> None:
    assert call(server, "/nope")[0] == 404
    assert call(server, "/health", {"prompt": "x"})[0] == 404


def test_sample_prints_completions_with_their_rewards(trained_run: Path, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    pairs = [(3, 4), (2, 2), (5, 1), (0, 9)]
    prompts.write_text(
        "".join(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n" for a, b in pairs)
    )
    result = run_entry(
        ["sample", str(trained_run), "--prompts", str(prompts), "--greedy", "--json"], launcher=[LLM_RL]
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [json.loads(line) for line in result.stdout.splitlines()]
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
