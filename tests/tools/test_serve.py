"""`llm-rl serve` over a trained embedded policy.

On llm-rl's FastAPI server: health, greedy generation equal to transformers', batching, and bad requests
answered with a 4xx that says why. Then OpenAI's API through the official client against both servers,
llm-rl's and vLLM's (`--backend vllm`, marked vllm): completions and chat greedily equal to transformers',
the run's chat template and system prompt, streaming, stop strings, the model list and the API key; on
llm-rl's server alone its limits, its error shapes and its batches of concurrent clients. Last, the flags
and folders that `llm-rl serve` refuses, with their exit codes.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml

from llm_rl.generation.backends import vllm_problem
from tests.conftest import REPO
from tests.tools.conftest import greedy_completion

SERVE_LIMITS = ["--max-prompts", "4", "--max-prompt-tokens", "16", "--max-new-tokens", "8"]
# vLLM's CPU server takes tens of seconds to start, more on a busy machine.
START_SECONDS = 600


class RunningServer:
    """`llm-rl serve` started by a test: its process and the base URL it printed."""

    def __init__(self, process: subprocess.Popen, url: str, line: str) -> None:
        self.process = process
        self.url = url
        self.line = line

    def stop(self) -> int:
        """SIGTERM, as a service manager stops it; its exit code (killed after a minute)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise


def serving_line(process: subprocess.Popen, timeout: float) -> str:
    """The first stdout line that names the server's address ("" when the process exits first)."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in process.stdout:
            lines.put(line)
            if " on http://" in line:
                break
        lines.put("")

    threading.Thread(target=read, daemon=True).start()
    while (line := lines.get(timeout=timeout)) and " on http://" not in line:
        pass
    return line


@contextmanager
def running_server(source: Path, *options: str, env: dict[str, str] | None = None, stderr=subprocess.DEVNULL):
    """`llm-rl serve SOURCE --port 0 OPTIONS` from this checkout (`python -m llm_rl.cli`, run in the repo,
    imports its llm_rl); yields it once it prints its address, and stops it with SIGTERM."""
    command = [sys.executable, "-m", "llm_rl.cli", "serve", str(source), "--port", "0", *options]
    process = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=stderr, text=True, env={**os.environ, **(env or {})}
    )
    server = None
    try:
        line = serving_line(process, START_SECONDS)
        assert " on http://127.0.0.1:" in line, (line, process.poll())
        server = RunningServer(process, line.split(" on ", 1)[1].split()[0], line)
        yield server
    finally:
        if server is None or server.process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def server(trained_run: Path):
    """`llm-rl serve` on a free loopback port, with small limits; yields its base URL."""
    with running_server(trained_run, "--batch-wait-ms", "300", *SERVE_LIMITS) as running:
        yield running.url
        running.stop()


def call(url: str, path: str, body: bytes | dict | None = None, key: str | None = None) -> tuple[int, dict]:
    """(status, JSON answer; {} for an empty one) of a GET (no body) or POST."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"} if key else {}
    request = urllib.request.Request(
        url + path, data=data, method="POST" if data is not None else "GET", headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


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


# ----------------------------------------------------------------------------------------------------
# The OpenAI API, through the official client, against a trained run given a chat template and a
# system prompt (the embedded tokenizer has no template; this one reads only digits, '+', '=' and ' '),
# on llm-rl's server and on vLLM's.
# ----------------------------------------------------------------------------------------------------

API_KEY = "test-key-3f9a"
DIGIT_TEMPLATE = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
SYSTEM_PROMPT = "1+1=2"
OPENAI_LIMITS = ["--max-prompts", "4", "--max-prompt-tokens", "24", "--max-new-tokens", "8"]
MAX_BODY = 4096


@pytest.fixture(scope="module")
def chat_run(trained_run: Path, tmp_path_factory) -> Path:
    """A copy of the trained run whose tokenizer has a chat template and whose recipe a system prompt."""
    from transformers import AutoTokenizer

    run = tmp_path_factory.mktemp("chat") / "arith"
    shutil.copytree(trained_run, run)
    tokenizer = AutoTokenizer.from_pretrained(run / "final")
    tokenizer.chat_template = DIGIT_TEMPLATE
    tokenizer.save_pretrained(run / "final")
    recipe = yaml.safe_load((run / "recipe.yaml").read_text())
    recipe["data"]["system_prompt"] = SYSTEM_PROMPT
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    return run


def trained_on_vllm(run: Path, folder: Path) -> Path:
    """A copy of `run` in `folder` whose recipe says it generated with vLLM (`--backend auto` then serves
    it on vLLM's server where vLLM is installed)."""
    copy = folder / run.name
    shutil.copytree(run, copy)
    recipe = yaml.safe_load((copy / "recipe.yaml").read_text())
    recipe["generation"]["backend"] = "vllm"
    (copy / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    return copy


@pytest.fixture(scope="module")
def api_server(chat_run: Path, tmp_path_factory):
    """`llm-rl serve` with the key from LLM_RL_API_KEY and small limits; yields (base URL, stderr file)."""
    log = tmp_path_factory.mktemp("serve_log") / "stderr.txt"
    options = ["--batch-wait-ms", "300", "--max-body-bytes", str(MAX_BODY), *OPENAI_LIMITS]
    with (
        log.open("w") as stderr,
        running_server(chat_run, *options, env={"LLM_RL_API_KEY": API_KEY}, stderr=stderr) as running,
    ):
        yield running.url, log
        running.stop()


@pytest.fixture(scope="module")
def vllm_server(chat_run: Path, tmp_path_factory):
    """vLLM's server, started by `llm-rl serve` with no --backend on a copy of the chat run trained on vLLM,
    the key from LLM_RL_API_KEY and --max-new-tokens 8; yields (base URL, stderr file). On SIGTERM it stops
    with exit 0, and its port is free again."""
    run = trained_on_vllm(chat_run, tmp_path_factory.mktemp("vllm"))
    log = tmp_path_factory.mktemp("vllm_log") / "stderr.txt"
    with (
        log.open("w") as stderr,
        running_server(
            run, "--max-new-tokens", "8", env={"LLM_RL_API_KEY": API_KEY}, stderr=stderr
        ) as running,
    ):
        # vLLM's own output goes to stderr: stdout has the one line.
        assert running.line.startswith(f"serving {run} as 'arith' on http://127.0.0.1:"), running.line
        assert "vLLM's OpenAI API" in running.line
        yield running.url, log
        assert running.stop() == 0, log.read_text()[-3000:]
        assert running.process.stdout.read() == ""
    port = int(running.url.rsplit(":", 1)[1])
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0, "vLLM's server still listens"


@dataclass(frozen=True)
class Served:
    """One OpenAI-compatible server under test, serving the chat run as 'arith' with API_KEY."""

    kind: str  # "fastapi" (llm-rl's) or "vllm"
    url: str
    log: Path

    def client(self, key: str = API_KEY):
        import openai

        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0, timeout=120)

    def completion_ids(self, run: Path, prompt: str) -> list[int]:
        """The ids the policy sees for a /v1/completions prompt: llm-rl's server formats it as training did
        (template and system prompt); vLLM's completes the text as sent."""
        if self.kind == "fastapi":
            return chat_prompt_ids(run, prompt)
        return plain_ids(run, prompt)


@pytest.fixture(scope="module", params=["fastapi", pytest.param("vllm", marks=pytest.mark.vllm)])
def served(request) -> Served:
    """Each server in turn (vLLM's where vLLM is installed), started once for the module."""
    fixture = "api_server" if request.param == "fastapi" else "vllm_server"
    url, log = request.getfixturevalue(fixture)
    return Served(request.param, url, log)


@pytest.fixture
def client(api_server):
    import openai

    return openai.OpenAI(base_url=api_server[0] + "/v1", api_key=API_KEY, max_retries=0, timeout=60)


@pytest.fixture
def raw_completions(served: Served, request):
    """(client, model, policy folder) of a /v1/completions that sees the prompt text as sent: the plain run
    on llm-rl's server (no template there), the chat run on vLLM's (no template on completions)."""
    import openai

    if served.kind == "vllm":
        return served.client(), "arith", request.getfixturevalue("chat_run") / "final"
    url = request.getfixturevalue("server")
    plain = openai.OpenAI(base_url=url + "/v1", api_key="no-key-set", max_retries=0, timeout=60)
    return plain, "grpo", request.getfixturevalue("trained_run") / "final"


def plain_ids(run: Path, text: str) -> list[int]:
    from transformers import AutoTokenizer

    return list(AutoTokenizer.from_pretrained(run / "final")(text)["input_ids"])


def chat_prompt_ids(run: Path, user: str, system: str = SYSTEM_PROMPT) -> list[int]:
    """The ids the run's policy sees for a user message: the system prompt added, the template applied."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(run / "final")
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return list(
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)[
            "input_ids"
        ]
    )


def greedy_from_ids(final: Path, ids: list[int], max_new_tokens: int) -> tuple[str, int, str]:
    """transformers' own greedy completion of token ids: its text, token count (EOS included) and
    OpenAI's finish reason."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(final)
    model = AutoModelForCausalLM.from_pretrained(final).eval()
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
        )
    response = out[0, len(ids) :].tolist()
    reason = "length"
    if tokenizer.eos_token_id in response:
        response = response[: response.index(tokenizer.eos_token_id) + 1]
        reason = "stop"
    return tokenizer.decode(response, skip_special_tokens=True), len(response), reason


def test_openai_client_lists_the_one_model(served: Served) -> None:
    assert [model.id for model in served.client().models.list().data] == ["arith"]


def test_openai_client_completes_greedily_as_transformers(served: Served, chat_run: Path) -> None:
    client = served.client()
    answer = client.completions.create(model="arith", prompt="3+4=", max_tokens=6, temperature=0)
    ids = served.completion_ids(chat_run, "3+4=")
    text, tokens, reason = greedy_from_ids(chat_run / "final", ids, 6)
    [choice] = answer.choices
    assert (choice.text, choice.finish_reason) == (text, reason)
    assert answer.usage.prompt_tokens == len(ids)
    assert answer.usage.completion_tokens == tokens
    assert answer.usage.total_tokens == len(ids) + tokens
    several = client.completions.create(model="arith", prompt=["1+2=", "5+3="], max_tokens=4, n=2)
    assert [c.index for c in several.choices] == [0, 1, 2, 3]


def test_openai_client_chats_with_the_runs_template_and_system_prompt(served: Served, chat_run: Path) -> None:
    """The run's system prompt comes first when the client sends none; a client's own replaces it."""
    client = served.client()
    for system, messages in [
        (SYSTEM_PROMPT, [{"role": "user", "content": "2+5="}]),
        ("3+3=6", [{"role": "system", "content": "3+3=6"}, {"role": "user", "content": "2+5="}]),
    ]:
        answer = client.chat.completions.create(model="arith", messages=messages, max_tokens=6, temperature=0)
        ids = chat_prompt_ids(chat_run, "2+5=", system)
        text, tokens, reason = greedy_from_ids(chat_run / "final", ids, 6)
        [choice] = answer.choices
        assert choice.message.role == "assistant" and choice.message.content == text
        assert choice.finish_reason == reason
        assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (len(ids), tokens)


def test_concurrent_greedy_completions_equal_transformers(raw_completions) -> None:
    client, model, final = raw_completions
    prompts = [f"{a}+{b}=" for a, b in [(1, 2), (3, 3), (4, 1), (2, 6), (5, 2), (7, 1), (9, 9), (0, 4)]]

    def ask(prompt: str) -> tuple[str, str]:
        choice = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0).choices[0]
        return choice.text, choice.finish_reason

    with ThreadPoolExecutor(len(prompts)) as pool:
        answers = list(pool.map(ask, prompts))
    for prompt, answer in zip(prompts, answers, strict=True):
        text, _, reason = greedy_from_ids(final, plain_ids(final.parent, prompt), 6)
        assert answer == (text, reason), prompt


def test_openai_client_streams_completions_and_chat(served: Served, raw_completions) -> None:
    """Completions on text the policy answers with digits, chat on the templated run."""
    plain, model, _ = raw_completions
    whole = plain.completions.create(model=model, prompt="3+4=", max_tokens=8, temperature=0)
    assert whole.choices[0].text
    chunks = list(
        plain.completions.create(
            model=model,
            prompt="3+4=",
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens

    client = served.client()
    chat_whole = client.chat.completions.create(
        model="arith", messages=[{"role": "user", "content": "4+4="}], max_tokens=8, temperature=0
    )
    stream = client.chat.completions.create(
        model="arith",
        messages=[{"role": "user", "content": "4+4="}],
        max_tokens=8,
        temperature=0,
        stream=True,
    )
    chat_chunks = list(stream)
    assert chat_chunks[0].choices[0].delta.role == "assistant"
    assert (
        "".join(c.choices[0].delta.content or "" for c in chat_chunks)
        == chat_whole.choices[0].message.content
    )
    assert chat_chunks[-1].choices[0].finish_reason == chat_whole.choices[0].finish_reason


def test_stream_ends_with_done(served: Served) -> None:
    body = {"model": "arith", "prompt": "1+2=", "max_tokens": 3, "stream": True}
    request = urllib.request.Request(
        served.url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = [line for line in response.read().decode().split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    assert all(event.startswith("data: {") for event in events[:-1])


def test_stop_strings_cut_the_text(raw_completions) -> None:
    """On text the policy answers with digits."""
    plain, model, _ = raw_completions
    for prompt in [f"{a}+{b}=" for a in range(1, 10) for b in range(1, 10)]:
        whole = plain.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0)
        text = whole.choices[0].text
        if text:
            break
    else:
        pytest.skip("the policy wrote nothing to cut")
    stop = text[-1]
    cut = plain.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0, stop=[stop, "@"])
    assert cut.choices[0].text == text[: text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"
    assert cut.usage.completion_tokens <= whole.usage.completion_tokens


def test_a_wrong_or_missing_key_gets_401_and_is_never_logged(served: Served) -> None:
    import openai

    wrong = "wrong-key-77c1"
    with pytest.raises(openai.AuthenticationError) as caught:
        served.client(wrong).completions.create(model="arith", prompt="1+1=", max_tokens=2)
    assert caught.value.status_code == 401
    assert wrong not in json.dumps(caught.value.body) and API_KEY not in json.dumps(caught.value.body)
    assert openai_error(caught.value)["code"] == "invalid_api_key"
    status, answer = call(served.url, "/v1/models")  # no Authorization header at all
    assert status == 401 and answer["error"]["code"] == "invalid_api_key"
    # Every path wants it, not /v1 alone: vLLM's /invocations generates too.
    body = {"model": "arith", "prompt": "1+1=", "max_tokens": 2}
    assert call(served.url, "/invocations", body)[0] == 401
    # /health stays open for liveness probes.
    assert call(served.url, "/health")[0] == 200
    # vLLM's access lines reach the log through `llm-rl serve`, a moment after the answer.
    deadline = time.monotonic() + 30
    while " 401" not in (logged := served.log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "POST /v1/completions" in logged and " 401" in logged
    assert API_KEY not in logged and wrong not in logged


TEMPLATES = {
    "digits": DIGIT_TEMPLATE,
    "roles, opening with a newline": "\n{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}",
    "its own system default": "{% if messages[0]['role'] != 'system' %}[default]{% endif %}"
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}|{% endfor %}",
}
SYSTEM_PROMPTS = ["1+1=2", 'say "hi" \\ then {% raw %} %} }} \n\ttab', "émoji 😀 and ünïcode"]


@pytest.mark.parametrize("system", SYSTEM_PROMPTS)
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_the_template_given_to_vllm_adds_the_system_prompt_as_training_does(
    trained_run: Path, name: str, system: str
) -> None:
    """vLLM's server gets the run's template with the recipe's system prompt put first when a conversation
    has none: rendered, it equals the template on the messages training would have made."""
    from transformers import AutoTokenizer

    from llm_rl.data.prompts import format_prompt
    from llm_rl.tools.serve.vllm_server.policy import system_prompt_template

    tokenizer = AutoTokenizer.from_pretrained(trained_run / "final")
    template = TEMPLATES[name]
    wrapped = system_prompt_template(template, system)

    def render(chosen: str, messages: list[dict]) -> str:
        return tokenizer.apply_chat_template(
            messages, chat_template=chosen, tokenize=False, add_generation_prompt=True
        )

    for messages in [
        [{"role": "user", "content": "2+2="}],
        [
            {"role": "user", "content": "2+2="},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "1+3="},
        ],
        [{"role": "system", "content": "the client's own"}, {"role": "user", "content": "2+2="}],
    ]:
        assert render(wrapped, messages) == render(template, format_prompt(messages, True, system)), messages
    assert system_prompt_template(template, None) == template


@pytest.mark.vllm
def test_vllm_cuts_max_tokens_to_max_new_tokens(vllm_server) -> None:
    """--max-new-tokens 8 is vLLM's server-wide cap: a larger ask gets 8 tokens at most."""
    status, answer = call(
        vllm_server[0],
        "/v1/completions",
        {"model": "arith", "prompt": "1+1=", "max_tokens": 50, "temperature": 0, "ignore_eos": True},
        key=API_KEY,
    )
    assert status == 200, answer
    assert answer["usage"]["completion_tokens"] == 8 and answer["choices"][0]["finish_reason"] == "length"


# On llm-rl's server alone: its limits, its error shapes, its batches.


def openai_error(err) -> dict:
    return err.body if "message" in err.body else err.body["error"]


@pytest.mark.parametrize(
    ("case", "arguments", "status", "code", "flag"),
    [
        ("prompts", {"prompt": ["1+1="] * 5}, 400, "too_many_prompts", "--max-prompts"),
        ("prompts x n", {"prompt": ["1+1="] * 3, "n": 2}, 400, "too_many_prompts", "--max-prompts"),
        ("max_tokens", {"prompt": "1+1=", "max_tokens": 9}, 400, "max_tokens_limit", "--max-new-tokens"),
        ("prompt tokens", {"prompt": "1+1=" * 6}, 400, "context_length_exceeded", "--max-prompt-tokens"),
        ("body", {"prompt": "1+1=" * 1100}, 413, "body_too_large", "--max-body-bytes"),
    ],
)
def test_each_limit_answers_openais_error_shape_naming_it(
    client, case, arguments, status, code, flag
) -> None:
    import openai

    with pytest.raises(openai.APIStatusError) as caught:
        client.completions.create(model="arith", **{"max_tokens": 2, **arguments})
    assert caught.value.status_code == status, case
    error = openai_error(caught.value)
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code and flag in error["message"]
    assert client.completions.create(model="arith", prompt="1+1=", max_tokens=2).choices  # still serving


def test_malformed_json_is_400_and_unknown_fields_422_and_the_server_keeps_serving(
    client, api_server
) -> None:
    import openai

    request = urllib.request.Request(
        api_server[0] + "/v1/chat/completions",
        data=b'{"model": "arith", "messages": [',
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=60)
    assert caught.value.code == 400
    assert json.loads(caught.value.read())["error"]["code"] == "invalid_json"

    with pytest.raises(openai.UnprocessableEntityError) as unknown:
        client.completions.create(model="arith", prompt="1+1=", extra_body={"temprature": 0})
    error = openai_error(unknown.value)
    assert error["param"] == "temprature" and "did you mean 'temperature'" in error["message"]

    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4o", prompt="1+1=", max_tokens=2)
    assert client.chat.completions.create(
        model="arith", messages=[{"role": "user", "content": "1+1="}], max_tokens=2
    ).choices


def test_sixteen_concurrent_clients_are_answered_in_shared_batches(
    client, api_server, chat_run: Path
) -> None:
    import openai

    url = api_server[0]
    _, before = call(url, "/health")
    prompts = [f"{a}+{b}=" for a in range(1, 5) for b in range(1, 5)]

    def ask(prompt: str) -> str:
        own = openai.OpenAI(base_url=url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
        return (
            own.completions.create(model="arith", prompt=prompt, max_tokens=4, temperature=0).choices[0].text
        )

    with ThreadPoolExecutor(16) as pool:
        texts = list(pool.map(ask, prompts))
    for prompt, text in zip(prompts, texts, strict=True):
        assert text == greedy_from_ids(chat_run / "final", chat_prompt_ids(chat_run, prompt), 4)[0], prompt
    _, after = call(url, "/health")
    requests = after["requests"] - before["requests"]
    batches = after["batches"] - before["batches"]
    sizes = after["recent_batch_sizes"][-batches:]
    print(f"16 concurrent requests -> {batches} generate calls, batch sizes {sizes}")
    assert requests == 16 and sum(sizes) == 16
    assert batches < 16 and max(sizes) > 1


def test_completion_text_holds_back_a_possible_stop_string(trained_run: Path) -> None:
    from transformers import AutoTokenizer

    from llm_rl.tools.serve.decoding import CompletionText

    tokenizer = AutoTokenizer.from_pretrained(trained_run / "final")
    ids = tokenizer("12+34", add_special_tokens=False)["input_ids"]
    text = CompletionText(tokenizer, [tokenizer.eos_token_id], ["+3"], incremental=True)
    pieces = []
    for token in ids:
        text.add(token)
        pieces.append(text.delta())
    text.close()
    pieces.append(text.delta())
    assert "".join(pieces) == "12" and text.finish_reason == "stop"
    assert text.tokens == len(tokenizer("12+3", add_special_tokens=False)["input_ids"])


def serve_exit(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llm_rl.cli", "serve", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def last_line(result: subprocess.CompletedProcess) -> str:
    return result.stderr.strip().splitlines()[-1]


def test_a_bad_policy_folder_exits_2_with_one_line(tmp_path: Path) -> None:
    result = serve_exit(str(tmp_path), "--port", "0")
    assert result.returncode == 2
    line = last_line(result)
    assert line.startswith("error: ") and str(tmp_path) in line and "Traceback" not in result.stderr


@pytest.mark.parametrize("backend", ["hf", pytest.param("vllm", marks=pytest.mark.vllm)])
def test_a_port_in_use_exits_2_naming_it(trained_run: Path, backend: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = serve_exit(str(trained_run), "--port", str(port), "--backend", backend, timeout=300)
    assert result.returncode == 2
    line = last_line(result)
    assert (
        line.startswith(f"error: --port {port}: cannot serve on 127.0.0.1")
        and "Traceback" not in result.stderr
    )


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--max-prompts", "4"),
        ("--max-prompt-tokens", "16"),
        ("--max-body-bytes", "4096"),
        ("--batch-wait-ms", "50"),
    ],
)
def test_limit_flags_of_llm_rls_server_with_backend_vllm_exit_2_naming_the_flag(
    tmp_path: Path, flag: str, value: str
) -> None:
    """Refused before the policy or vLLM is looked for: on any host, for any folder."""
    result = serve_exit(str(tmp_path), "--backend", "vllm", flag, value)
    assert result.returncode == 2
    line = last_line(result)
    assert line.startswith(f"error: {flag} is a limit of llm-rl's own server") and "--backend hf" in line
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(vllm_problem() is None, reason="vLLM is installed here")
def test_backend_vllm_without_vllm_exits_2_with_the_install_hint(trained_run: Path) -> None:
    result = serve_exit(str(trained_run), "--backend", "vllm", "--port", "0")
    assert result.returncode == 2
    line = last_line(result)
    assert line.startswith("error: --backend: 'vllm' cannot run on this host: vLLM is not installed")
    assert "make vllm-env" in line and "Traceback" not in result.stderr


@pytest.mark.skipif(vllm_problem() is None, reason="vLLM is installed here")
def test_a_run_trained_on_vllm_is_served_by_llm_rls_server_without_vllm(
    trained_run: Path, tmp_path: Path
) -> None:
    run = trained_on_vllm(trained_run, tmp_path)
    with running_server(run) as running:
        assert "POST /generate" in running.line
        status, health = call(running.url, "/health")
        assert status == 200 and health["model"] == str(run / "final")


@pytest.mark.vllm
def test_an_architecture_vllm_lacks_exits_2_naming_it(trained_run: Path, tmp_path: Path) -> None:
    final = tmp_path / "final"
    shutil.copytree(trained_run / "final", final)
    config = json.loads((final / "config.json").read_text())
    (final / "config.json").write_text(json.dumps({**config, "architectures": ["LlamaForNothing"]}))
    result = serve_exit(str(final), "--backend", "vllm", "--port", "0", timeout=300)
    assert result.returncode == 2
    line = last_line(result)
    assert line.startswith(f"error: {final}: --backend vllm: vLLM cannot load this model (LlamaForNothing)")
    assert "--backend hf" in line and "Traceback" not in result.stderr


@pytest.mark.vllm
def test_a_vllm_server_that_dies_at_start_up_exits_1_with_its_cause(
    trained_run: Path, tmp_path: Path
) -> None:
    """Weights that do not load: vLLM's server exits before it answers, and so does `llm-rl serve`."""
    final = tmp_path / "final"
    shutil.copytree(trained_run / "final", final)
    (final / "model.safetensors").write_bytes(b"not weights")
    result = serve_exit(str(final), "--backend", "vllm", "--port", "0", timeout=600)
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stdout == ""
    line = last_line(result)
    assert (
        line.startswith("error: vLLM's server exited with code ") and "before it answered /health: " in line
    )
    assert "Error" in line.split("/health: ", 1)[1]
