"""`llm-rl serve`: a trained policy over HTTP with OpenAI's API, for the clients teams already have, on
llm-rl's own server (FastAPI and uvicorn) or on vLLM's (`--backend vllm`, `vllm_server/`).

llm-rl's server:

- OpenAI's API: `POST /v1/completions`, `POST /v1/chat/completions` (the run's chat template and system
  prompt, as in training), `GET /v1/models`; `stream: true` answers as server-sent events.
- `POST /generate` (text or chat prompts, several per request; `{"completions": [{text, tokens,
  finish_reason}]}`) and `GET /health` (the model, the limits, the batch counts), as before.

Requests that arrive together are generated in one batch (`batching.py`). Every limit, when crossed, is
a 4xx that names it (`limits.py`), in OpenAI's error shape (`errors.py`). With an API key, every path but
`/health` wants it as a Bearer token (`gate.py`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llm_rl.tools.serve.limits import ServeLimits
    from llm_rl.tools.serve.server import ApiServer, make_server, serve_backend

__all__ = ["ApiServer", "ServeLimits", "make_server", "serve_backend"]
# Loaded on first use: vLLM's server imports `gate` (its `--middleware`) without the policy's libraries.
LAZY = {
    "ApiServer": "server",
    "make_server": "server",
    "serve_backend": "server",
    "ServeLimits": "limits",
}


def __getattr__(name: str) -> Any:
    if name not in LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{LAZY[name]}"), name)
