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

The parts: `policy` (what the server is started on), `command` (its command line and environment),
`process` (the child process: port, health, signals, stop) and `log` (its output relayed, the cause of a
failure).
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path

from llm_rl.errors import UserInputError
from llm_rl.tools.serve.limits import ServeLimits
from llm_rl.tools.serve.server import serving_line
from llm_rl.tools.serve.vllm_server.command import server_command, server_environment
from llm_rl.tools.serve.vllm_server.policy import served_policy
from llm_rl.tools.serve.vllm_server.process import ServerProcess, base_url, reserve_port, signals_handed_on

# The FastAPI server's limits that vLLM's server has no counterpart of: `ServeLimits` field -> flag.
FASTAPI_ONLY_LIMITS = {
    "max_prompts": "--max-prompts",
    "max_prompt_tokens": "--max-prompt-tokens",
    "max_body_bytes": "--max-body-bytes",
    "batch_wait_seconds": "--batch-wait-ms",
}


class ServerExited(Exception):
    """vLLM's server exited without being asked to (at start-up, or later)."""


def refuse_fastapi_limits(limits: ServeLimits, why: str) -> None:
    """A `UserInputError` naming the first FastAPI-only limit flag set to other than its default."""
    defaults = ServeLimits()
    for field, flag in FASTAPI_ONLY_LIMITS.items():
        if getattr(limits, field) != getattr(defaults, field):
            raise UserInputError(
                f"{flag} is a limit of llm-rl's own server; {why}, whose server has no such limit: drop "
                f"{flag}, or serve with --backend hf"
            )


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
