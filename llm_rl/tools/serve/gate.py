"""What a request must pass before any endpoint sees it: the API key, then the body size.

An ASGI middleware rather than a FastAPI dependency, because FastAPI reads and parses the body before
dependencies run: a request without the key must be refused before its body is looked at, and a body
over the limit before it is held in memory whole. A refused body is read and dropped (up to 64 MiB), so
that a client that sends it whole hears the answer instead of a broken pipe.

`KeyGate` is the key check alone, for vLLM's server (`--middleware`): vLLM's own key guards `/v1` and a
few other prefixes only, and leaves paths such as `/invocations` (inference too) open.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi.responses import JSONResponse

from llm_rl.tools.serve.errors import ApiError, error_payload
from llm_rl.tools.serve.limits import ServeLimits

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

# Liveness probes need no key; the answer names no secret.
OPEN_PATHS = frozenset({"/health"})
DRAIN_LIMIT = 64 << 20


class Gate:
    """ASGI middleware: a Bearer key (when the server has one) on every path but /health, and a body of at
    most `limits.max_body_bytes`, handed on to the app already read."""

    def __init__(self, app: App, limits: ServeLimits, api_key: str | None) -> None:
        self.app = app
        self.limits = limits
        self.api_key = api_key.encode() if api_key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not authorized(scope, self.api_key):
            await refuse_unauthorized(scope, receive, send)
            return
        body, error = await self.read_body(scope, receive)
        if error is not None:
            await refuse(error, scope, receive, send, {"Connection": "close"})
            return
        await self.app(scope, replay(body, receive), send)

    async def read_body(self, scope: Scope, receive: Receive) -> tuple[bytes, ApiError | None]:
        """The whole body, or a 413 once it is known to pass the limit (from Content-Length, or counted)."""
        limit = self.limits.max_body_bytes
        declared = header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await drain(receive)
            return b"", self.limits.body_too_large(int(declared))
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            more = message.get("more_body", False)
            if size > limit:
                if more:
                    await drain(receive)
                return b"", self.limits.body_too_large(size, exact=False)
            chunks.append(chunk)
        return b"".join(chunks), None


class KeyGate:
    """ASGI middleware for vLLM's server, which builds middleware from its class alone: the key from
    `VLLM_API_KEY` (when set) on every path but /health, as `Gate` has it; CORS preflights (OPTIONS, which
    carry no key) pass, as vLLM lets them."""

    def __init__(self, app: App) -> None:
        self.app = app
        key = os.environ.get("VLLM_API_KEY")
        self.api_key = key.encode() if key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "OPTIONS" or authorized(scope, self.api_key):
            await self.app(scope, receive, send)
            return
        await refuse_unauthorized(scope, receive, send)


def authorized(scope: Scope, api_key: bytes | None) -> bool:
    """No key set, an open path, or `Authorization: Bearer <the key>` (compared in constant time)."""
    if api_key is None or scope["path"] in OPEN_PATHS:
        return True
    value = header(scope, b"authorization") or b""
    scheme, _, token = value.partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), api_key)


async def refuse_unauthorized(scope: Scope, receive: Receive, send: Send) -> None:
    """401 in OpenAI's shape, the body read and dropped first."""
    await drain(receive)
    error = ApiError(
        401,
        "a missing or wrong API key: send the server's key as 'Authorization: Bearer <key>'",
        code="invalid_api_key",
    )
    await refuse(error, scope, receive, send, {"WWW-Authenticate": "Bearer"})


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return value
    return None


async def drain(receive: Receive) -> None:
    """Read and drop what is left of the body, up to DRAIN_LIMIT bytes."""
    size, more = 0, True
    while more and size <= DRAIN_LIMIT:
        message = await receive()
        if message["type"] != "http.request":
            return
        size += len(message.get("body", b""))
        more = message.get("more_body", False)


async def refuse(
    error: ApiError, scope: Scope, receive: Receive, send: Send, headers: dict[str, str]
) -> None:
    response = JSONResponse(error_payload(error, scope["path"]), status_code=error.status, headers=headers)
    await response(scope, receive, send)


def replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the body already read, then hands on to the client's (to hear a disconnect)."""
    given = False

    async def again() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again
