"""The process side of `llm-rl serve` on FastAPI: load the policy, bind the port, run the app on uvicorn.

The socket is bound here, before uvicorn starts, so that a port in use is a plain `OSError` the command
line turns into exit 2, and port 0's pick is known before the first request. Logs go to stderr only:
standard output carries the one "serving ... on http://HOST:PORT" line that scripts read.
"""

from __future__ import annotations

import copy
import socket
from pathlib import Path

import uvicorn
from fastapi import FastAPI
from uvicorn.config import LOGGING_CONFIG

from llm_rl.run_folder import FINAL_DIR
from llm_rl.tools.export import policy_folder
from llm_rl.tools.sample import PolicyGenerator, run_recipe, tool_backend
from llm_rl.tools.serve.app import Service, build_app
from llm_rl.tools.serve.batching import Batcher
from llm_rl.tools.serve.limits import ServeLimits
from llm_rl.training.checkpoints import CHECKPOINT_PATTERN


class ApiServer:
    """The app and its bound, listening socket; `serve_forever` runs it until interrupted."""

    def __init__(self, app: FastAPI, sock: socket.socket, model_id: str) -> None:
        self.app = app
        self.socket = sock
        self.model_id = model_id

    @property
    def server_address(self) -> tuple[str, int]:
        host, port = self.socket.getsockname()[:2]
        return host, port

    def serve_forever(self) -> None:
        """Serve until SIGINT or SIGTERM (uvicorn's own handlers: a graceful stop)."""
        config = uvicorn.Config(self.app, log_config=stderr_logging(), access_log=True, lifespan="off")
        uvicorn.Server(config).run(sockets=[self.socket])

    def server_close(self) -> None:
        self.socket.close()


def stderr_logging() -> dict:
    """uvicorn's log set-up with the access lines on stderr too, and no colours."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    for formatter in config["formatters"].values():
        formatter["use_colors"] = False
    return config


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port) and listening; an `OSError` when the port is taken."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    return socket.create_server((host, port), family=family, backlog=2048)


def default_model_id(source: Path) -> str:
    """The name clients ask for: the run folder's name, with final/ or the checkpoint when named."""
    folder = source.resolve()
    if folder.name == FINAL_DIR or CHECKPOINT_PATTERN.match(folder.name):
        return f"{folder.parent.name}/{folder.name}"
    return folder.name


def serve_backend(source: Path, requested: str) -> str:
    """The backend `llm-rl serve --backend REQUESTED` serves `source` with: `auto` is the run's own where
    this host runs it (vllm for a run trained on vLLM, with vLLM installed), else hf; one named outright
    must run here (a `RecipeError` naming `--backend` and how to install it otherwise)."""
    return tool_backend(requested, run_recipe(policy_folder(source)))


def serving_line(source: Path, model_id: str, host: str, port: int, what: str, api_key: str | None) -> str:
    """The one line on stdout once the server answers, which scripts read for its address."""
    key = "; API key required" if api_key else ""
    return f"serving {source} as {model_id!r} on http://{host}:{port} ({what}{key})"


def make_server(
    source: Path,
    host: str,
    port: int,
    limits: ServeLimits,
    api_key: str | None = None,
    model_id: str | None = None,
    backend: str = "auto",
) -> ApiServer:
    """A ready server for the policy at `source` (a run folder, final/, checkpoint or adapter), generating
    on `backend` (hf, static or paged; auto: the run's own where this host runs it)."""
    generator = PolicyGenerator.from_source(source, backend)
    sock = listening_socket(host, port)
    service = Service(generator, Batcher(generator, limits), limits, model_id or default_model_id(source))
    return ApiServer(build_app(service, api_key), sock, service.model_id)
