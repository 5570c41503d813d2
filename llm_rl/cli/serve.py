"""`llm-rl serve`: a trained policy over HTTP, on llm-rl's FastAPI server or vLLM's own, until interrupted."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import TYPE_CHECKING

from llm_rl.cli.exit_codes import EXIT_FAILED, EXIT_OK
from llm_rl.errors import UserInputError

if TYPE_CHECKING:
    from llm_rl.tools.serve.limits import ServeLimits

API_KEY_VARIABLE = "LLM_RL_API_KEY"


def command_serve(args: argparse.Namespace) -> int:
    """Serve a trained policy over HTTP until interrupted: llm-rl's FastAPI server (OpenAI's API and
    /generate), or vLLM's own OpenAI-compatible server (`--backend vllm`, or `auto` for a run trained on vLLM)."""
    # Libraries print on import and load (transformers, under WANDB_MODE=offline): stdout is the one
    # "serving ... on http://HOST:PORT" line alone.
    with contextlib.redirect_stdout(sys.stderr):
        from llm_rl.tools.serve import ServeLimits, serve_backend
        from llm_rl.tools.serve.vllm_server import refuse_fastapi_limits

    limits = ServeLimits.from_flags(args)
    # The key from the flag or the environment; never printed.
    api_key = args.api_key or os.environ.get(API_KEY_VARIABLE) or None
    # The limit flags are checked first: before the policy, or vLLM, is looked for.
    if args.backend == "vllm":
        refuse_fastapi_limits(limits, "--backend vllm serves with vLLM's server")
    with contextlib.redirect_stdout(sys.stderr):
        backend = serve_backend(args.source, args.backend)
    if backend == "vllm":
        if args.backend == "auto":
            refuse_fastapi_limits(
                limits, "--backend auto serves this run, trained on vLLM, with vLLM's server"
            )
        return serve_with_vllm(args, limits, api_key)
    return serve_with_fastapi(args, limits, api_key, backend)


def serve_with_fastapi(
    args: argparse.Namespace, limits: ServeLimits, api_key: str | None, backend: str
) -> int:
    """llm-rl's FastAPI server, generating on `backend` (hf, static or paged)."""
    from llm_rl.tools.serve import make_server
    from llm_rl.tools.serve.server import serving_line

    try:
        with contextlib.redirect_stdout(sys.stderr):
            server = make_server(args.source, args.host, args.port, limits, api_key, args.model_name, backend)
    except OSError as err:
        raise UserInputError(f"--port {args.port}: cannot serve on {args.host}: {err.strerror}") from None
    host, port = server.server_address
    what = "OpenAI API under /v1, POST /generate, GET /health"
    print(serving_line(args.source, server.model_id, host, port, what, api_key), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return EXIT_OK


def serve_with_vllm(args: argparse.Namespace, limits: ServeLimits, api_key: str | None) -> int:
    """vLLM's OpenAI-compatible server as a child process, until SIGINT or SIGTERM (exit 0); exit 1 when it
    exits by itself, at start-up or later."""
    from llm_rl.tools.serve.vllm_server import ServerExited, serve_on_vllm

    try:
        serve_on_vllm(args.source, args.host, args.port, limits.max_new_tokens, api_key, args.model_name)
    except ServerExited as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
