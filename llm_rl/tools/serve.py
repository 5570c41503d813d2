"""`llm-rl serve`: a trained policy over HTTP, for checking what it writes.

`POST /generate` takes `{"prompt": ...}` or `{"prompts": [...]}` (text, or chat messages) with optional
`max_new_tokens`, `temperature` (0: greedy) and `top_p`, and answers `{"completions": [...]}`, each with
its `text`, `tokens` and `finish_reason` (`eos` or `length`). `GET /health` answers the model and the
counts served. Prompts are formatted as in training (the run's chat template and system prompt).
Requests that arrive together are generated in one batch; every limit, when crossed, is a 4xx answer
that says which.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from llm_rl.tools.sample import GenerationRequest, PolicyGenerator


@dataclass(frozen=True)
class ServeLimits:
    """What one request may ask for; more is a 400 (or 413 for the body) naming the limit."""

    max_body_bytes: int = 1 << 20
    max_prompts: int = 64
    max_prompt_tokens: int = 2048
    max_new_tokens: int = 512
    # How long the batcher waits for more requests to join a batch, and the largest batch it makes.
    batch_wait_seconds: float = 0.01
    max_batch_prompts: int = 64


class BadRequest(Exception):
    """A request the server will not run; the message says what to change."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


REQUEST_KEYS = {"prompt", "prompts", "max_new_tokens", "temperature", "top_p"}


def parse_request(body: Any, limits: ServeLimits, default_new_tokens: int) -> GenerationRequest:
    """A generate request's JSON body as a `GenerationRequest`, checked against the limits."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    unknown = sorted(set(body) - REQUEST_KEYS)
    if unknown:
        raise BadRequest(f"unknown key {unknown[0]!r}; known: {', '.join(sorted(REQUEST_KEYS))}")
    if ("prompt" in body) == ("prompts" in body):
        raise BadRequest("give one of 'prompt' (one prompt) or 'prompts' (a list)")
    prompts = [body["prompt"]] if "prompt" in body else body["prompts"]
    if not isinstance(prompts, list) or not prompts:
        raise BadRequest("'prompts' must be a non-empty list")
    if len(prompts) > limits.max_prompts:
        raise BadRequest(f"{len(prompts)} prompts in one request; the limit is {limits.max_prompts}")
    for index, prompt in enumerate(prompts):
        if not is_prompt(prompt):
            raise BadRequest(
                f"prompt {index}: must be text or a list of {{role, content}} messages with text content"
            )
    max_new_tokens = body.get("max_new_tokens", default_new_tokens)
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 1:
        raise BadRequest("'max_new_tokens' must be a positive integer")
    if max_new_tokens > limits.max_new_tokens:
        raise BadRequest(f"'max_new_tokens' is {max_new_tokens}; the limit is {limits.max_new_tokens}")
    temperature = number(body, "temperature", 1.0, low=0.0)
    top_p = number(body, "top_p", 1.0, low=0.0)
    if top_p == 0.0 or top_p > 1.0:
        raise BadRequest("'top_p' must be in (0, 1]")
    return GenerationRequest(prompts, max_new_tokens, temperature, top_p)


def is_prompt(prompt: Any) -> bool:
    """Text, or chat messages with text content."""
    if isinstance(prompt, str):
        return bool(prompt)
    return (
        isinstance(prompt, list)
        and bool(prompt)
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in prompt
        )
    )


def number(body: dict[str, Any], key: str, default: float, low: float) -> float:
    value = body.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or value < low:
        raise BadRequest(f"{key!r} must be a number of at least {low}")
    return float(value)


@dataclass
class Pending:
    request: GenerationRequest
    prompt_ids: list[list[int]]
    result: Future = field(default_factory=Future)


class Batcher:
    """One thread that runs the generator: requests with the same sampling settings that arrive within
    `batch_wait_seconds` of each other are generated together."""

    def __init__(self, generator: PolicyGenerator, limits: ServeLimits) -> None:
        self.generator = generator
        self.limits = limits
        self.inbox: queue.Queue[Pending] = queue.Queue()
        self.requests = 0
        self.batches = 0
        self.largest_batch = 0
        self._thread = threading.Thread(target=self._run, daemon=True, name="llm-rl-batcher")
        self._thread.start()

    def submit(self, request: GenerationRequest, prompt_ids: list[list[int]]) -> list[dict[str, Any]]:
        pending = Pending(request, prompt_ids)
        self.inbox.put(pending)
        return pending.result.result()

    def _run(self) -> None:
        while True:
            batch = [self.inbox.get()]
            size = len(batch[0].prompt_ids)
            while size < self.limits.max_batch_prompts:
                try:
                    more = self.inbox.get(timeout=self.limits.batch_wait_seconds)
                except queue.Empty:
                    break
                batch.append(more)
                size += len(more.prompt_ids)
            for group in self._by_settings(batch):
                self._generate(group)

    @staticmethod
    def _by_settings(batch: list[Pending]) -> list[list[Pending]]:
        """Requests that can share one generate call: the same length limit and sampling settings."""
        groups: dict[tuple, list[Pending]] = {}
        for pending in batch:
            groups.setdefault(pending.request.settings, []).append(pending)
        return list(groups.values())

    def _generate(self, group: list[Pending]) -> None:
        prompt_ids = [ids for pending in group for ids in pending.prompt_ids]
        try:
            completions = self.generator.generate(prompt_ids, group[0].request)
        except Exception as err:  # noqa: BLE001 - every waiting request gets the failure
            for pending in group:
                pending.result.set_exception(err)
            return
        self.requests += len(group)
        self.batches += 1
        self.largest_batch = max(self.largest_batch, len(prompt_ids))
        start = 0
        for pending in group:
            count = len(pending.prompt_ids)
            pending.result.set_result(completions[start : start + count])
            start += count


def make_handler(generator: PolicyGenerator, batcher: Batcher, limits: ServeLimits, model_name: str):
    """The request handler class, bound to one generator."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "llm-rl-serve"

        def do_GET(self) -> None:
            if self.path != "/health":
                self.answer(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {self.path}; GET /health"})
                return
            self.answer(
                HTTPStatus.OK,
                {
                    "status": "ok",
                    "model": model_name,
                    "device": str(generator.device),
                    "requests": batcher.requests,
                    "batches": batcher.batches,
                    "largest_batch": batcher.largest_batch,
                    "limits": limits.__dict__,
                },
            )

        def do_POST(self) -> None:
            if self.path != "/generate":
                self.answer(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {self.path}; POST /generate"})
                return
            try:
                request = parse_request(self.read_json(), limits, generator.default_new_tokens)
                prompt_ids = generator.encode(request.prompts)
                longest = max(len(ids) for ids in prompt_ids)
                if longest > limits.max_prompt_tokens:
                    raise BadRequest(f"a prompt of {longest} tokens; the limit is {limits.max_prompt_tokens}")
            except BadRequest as err:
                self.answer(err.status, {"error": str(err)})
                return
            completions = batcher.submit(request, prompt_ids)
            self.answer(HTTPStatus.OK, {"model": model_name, "completions": completions})

        def read_json(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            if length > limits.max_body_bytes:
                self.discard_body(length)
                raise BadRequest(
                    f"a body of {length} bytes; the limit is {limits.max_body_bytes}",
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                )
            try:
                return json.loads(self.rfile.read(length) or b"null")
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise BadRequest(f"the body is not JSON: {err}") from None

        def discard_body(self, length: int) -> None:
            """Read an oversized body in chunks and drop it, so that the client hears the 413 (clients
            that send the whole body first see a broken pipe otherwise); past 64 MiB, just hang up."""
            if length > 64 << 20:
                return
            while length > 0:
                chunk = self.rfile.read(min(length, 1 << 16))
                if not chunk:
                    return
                length -= len(chunk)

        def answer(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == HTTPStatus.REQUEST_ENTITY_TOO_LARGE:
                # The unread body would otherwise be taken for the next request.
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            """One line per request on stderr, without the client's address."""
            sys.stderr.write(f"{self.command} {self.path} {args[1] if len(args) > 1 else ''}\n")

    return Handler


def make_server(source: Path, host: str, port: int, limits: ServeLimits) -> ThreadingHTTPServer:
    """A ready HTTP server for the policy at `source` (a run folder, final/, checkpoint or adapter)."""
    generator = PolicyGenerator.from_source(source)
    batcher = Batcher(generator, limits)
    handler = make_handler(generator, batcher, limits, str(generator.folder))
    return ThreadingHTTPServer((host, port), handler)
