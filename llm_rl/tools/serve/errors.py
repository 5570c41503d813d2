"""Error answers: OpenAI's shape `{"error": {"message", "type", "param", "code"}}` on every endpoint but
`POST /generate`, which keeps its own `{"error": "message"}` (its contract from before the OpenAI API).

Request bodies are read and checked here too, so that every endpoint turns bad JSON into a 400 and a
body that does not fit its model into a 422 (a 400 on `/generate`) the same way, whatever the client's
Content-Type (curl's `-d` sends a form type).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from llm_rl.errors import did_you_mean

LEGACY_PATH = "/generate"

ModelT = TypeVar("ModelT", bound=BaseModel)

# What each /generate field must be, for its messages (the wording its clients and tests know).
LEGACY_FIELD_RULES = {
    "max_new_tokens": "a positive integer",
    "temperature": "a number of at least 0",
    "top_p": "a number in (0, 1]",
}


class ApiError(Exception):
    """A request the server will not run: the status, and a message that says what to change."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind


def error_payload(err: ApiError, path: str) -> dict[str, Any]:
    """The JSON body of an error answer, in the shape the endpoint at `path` promises."""
    if path == LEGACY_PATH:
        return {"error": err.message}
    return {"error": {"message": err.message, "type": err.kind, "param": err.param, "code": err.code}}


def error_response(err: ApiError, path: str) -> JSONResponse:
    return JSONResponse(error_payload(err, path), status_code=err.status)


def json_body(model: type[ModelT]) -> Callable[[Request], Awaitable[ModelT]]:
    """A FastAPI dependency: the request's body parsed as JSON and checked against `model`."""

    async def read(request: Request) -> ModelT:
        raw = await request.body()
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ApiError(400, f"the body is not JSON: {err}", code="invalid_json") from None
        if not isinstance(data, dict):
            raise ApiError(400, "the body must be a JSON object", code="invalid_json")
        try:
            return model.model_validate(data)
        except ValidationError as err:
            raise validation_error(err, model, legacy=request.url.path == LEGACY_PATH) from None

    return read


def validation_error(err: ValidationError, model: type[BaseModel], legacy: bool) -> ApiError:
    """The first problem pydantic found, as a 422 naming the field (on /generate, a 400 in its words)."""
    first = err.errors(include_url=False)[0]
    loc = [str(part) for part in first["loc"]]
    field = loc[0] if loc else None
    param = ".".join(loc) or None
    if first["type"] == "extra_forbidden":
        known = sorted(model.model_fields)
        noun = "key" if legacy else "field"
        message = f"unknown {noun} {field!r}{did_you_mean(str(field), known)}; known: {', '.join(known)}"
    elif first["type"] == "value_error":
        message = str(first["ctx"]["error"])
    elif legacy and field in LEGACY_FIELD_RULES:
        message = f"{field!r} must be {LEGACY_FIELD_RULES[field]}"
    else:
        message = f"{param}: {first['msg']}" if param else first["msg"]
    status = HTTPStatus.BAD_REQUEST if legacy else HTTPStatus.UNPROCESSABLE_ENTITY
    return ApiError(status, message, param=param, code=first["type"])
