"""The FastAPI application: OpenAI's `/v1/completions`, `/v1/chat/completions` and `/v1/models`, the
older `/generate`, and `/health` with the batcher's counts.

Every endpoint formats prompts as the run did in training (its chat template and system prompt), checks
the limits, and hands the prompts to the one batcher, so that requests that arrive together share one
generate call.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException

from llm_rl.data.prompts import has_chat_template
from llm_rl.errors import first_line
from llm_rl.tools.sample import GenerationRequest, PolicyGenerator
from llm_rl.tools.serve import openai_format as fmt
from llm_rl.tools.serve.batching import Batcher
from llm_rl.tools.serve.decoding import CompletionText
from llm_rl.tools.serve.errors import ApiError, error_response, json_body
from llm_rl.tools.serve.gate import Gate
from llm_rl.tools.serve.limits import ServeLimits
from llm_rl.tools.serve.schemas import ChatBody, CompletionBody, GenerateBody, SamplingBody

# Request bodies read by `json_body`: a 400 for bad JSON, a 422 (400 on /generate) naming the field.
CompletionJson = Annotated[CompletionBody, Depends(json_body(CompletionBody))]
ChatJson = Annotated[ChatBody, Depends(json_body(ChatBody))]
GenerateJson = Annotated[GenerateBody, Depends(json_body(GenerateBody))]


@dataclass
class Service:
    """The loaded policy, its batcher and limits, and the name clients ask for it by."""

    generator: PolicyGenerator
    batcher: Batcher
    limits: ServeLimits
    model_id: str
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def default_new_tokens(self) -> int:
        """The run's generation.max_new_tokens, within the server's limit."""
        return min(self.generator.default_new_tokens, self.limits.max_new_tokens)

    def check_model(self, model: str) -> None:
        if model != self.model_id:
            raise ApiError(
                404,
                f"model {model!r} is not served here; GET /v1/models lists {self.model_id!r}",
                param="model",
                code="model_not_found",
            )

    def encode(self, prompts: list[Any], param: str) -> list[list[int]]:
        """Token ids of each prompt as in training, checked against the prompt-token limit."""
        try:
            prompt_ids = self.generator.encode(prompts)
        except Exception as err:  # noqa: BLE001 - a template that refuses these messages, say
            raise ApiError(400, f"the prompt does not format: {first_line(err)}", param=param) from None
        self.limits.check_prompt_tokens(prompt_ids, param)
        return prompt_ids

    def sampling(self, body: SamplingBody, new_tokens: int | None, param: str) -> GenerationRequest:
        """How to generate for an OpenAI request, its token limit checked."""
        max_new_tokens = new_tokens or self.default_new_tokens
        self.limits.check_new_tokens(max_new_tokens, param)
        return GenerationRequest([], max_new_tokens, body.temperature, body.top_p)

    def new_text(self, body: SamplingBody) -> CompletionText:
        return CompletionText(
            self.generator.tokenizer,
            self.generator.stop_token_ids,
            body.stop_strings,
            incremental=body.stream,
        )

    async def complete(self, request: GenerationRequest, prompt_ids: list[list[int]]) -> list[list[int]]:
        """Each prompt's completion ids, generated with whatever else arrives at the same time."""
        return await asyncio.wrap_future(self.batcher.submit(request, prompt_ids))

    async def completion_texts(
        self, request: GenerationRequest, prompt_ids: list[list[int]], body: SamplingBody
    ) -> list[CompletionText]:
        texts = []
        for row in await self.complete(request, prompt_ids):
            text = self.new_text(body)
            text.add_all(row)
            text.close()
            texts.append(text)
        return texts

    async def stream(
        self, request: GenerationRequest, prompt_ids: list[list[int]], texts: list[CompletionText]
    ) -> AsyncIterator[tuple[int, str, str | None]]:
        """(row, new text, finish reason or None) as the batch generates; `texts` fill as it goes."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[tuple[int, int] | None] = asyncio.Queue()

        def deliver(event: tuple[int, int] | None) -> None:
            # RuntimeError: the loop has closed, the server is stopping.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(events.put_nowait, event)

        future = self.batcher.submit(request, prompt_ids, lambda row, token: deliver((row, token)))
        future.add_done_callback(lambda _: deliver(None))
        while (event := await events.get()) is not None:
            row, token = event
            texts[row].add(token)
            if piece := texts[row].delta():
                yield row, piece, None
        future.result()  # the generator's failure, if it failed
        for row, text in enumerate(texts):
            text.close()
            yield row, text.delta(), text.finish_reason


def repeated(prompt_ids: list[list[int]], n: int) -> list[list[int]]:
    """Each prompt n times in a row: choice i*n + j is prompt i's j-th completion, as OpenAI orders them."""
    return [ids for ids in prompt_ids for _ in range(n)]


def build_app(service: Service, api_key: str | None) -> FastAPI:
    """The application, behind the gate (API key, body size)."""
    app = FastAPI(title="llm-rl serve", docs_url=None, redoc_url=None)
    add_error_handlers(app)
    add_routes(app, service)
    app.add_middleware(Gate, limits=service.limits, api_key=api_key)
    return app


def add_error_handlers(app: FastAPI) -> None:
    """Every error in the endpoint's promised shape (OpenAI's, or /generate's own)."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, err: ApiError) -> JSONResponse:
        return error_response(err, request.url.path)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> JSONResponse:
        message = f"no such endpoint: {request.method} {request.url.path}"
        if err.status_code == 405:
            message = f"{request.url.path} does not take {request.method}"
        code = "not_found" if err.status_code == 404 else "method_not_allowed"
        return error_response(ApiError(err.status_code, message, code=code), request.url.path)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, err: RequestValidationError) -> JSONResponse:
        return error_response(ApiError(422, f"bad request: {err.errors()[0]['msg']}"), request.url.path)

    @app.exception_handler(Exception)
    async def failure(request: Request, err: Exception) -> JSONResponse:
        message = f"generation failed: {type(err).__name__}: {first_line(err)}"
        return error_response(ApiError(500, message, kind="server_error"), request.url.path)


def add_routes(app: FastAPI, service: Service) -> None:
    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "model": str(service.generator.folder),
            "model_id": service.model_id,
            "device": str(service.generator.device),
            **service.batcher.stats.as_dict(),
            "limits": asdict(service.limits),
        }

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return fmt.model_list(service.model_id, service.created)

    @app.post("/v1/completions", response_model=None)
    async def completions(
        body: CompletionJson,
    ) -> dict[str, Any] | StreamingResponse:
        service.check_model(body.model)
        service.limits.check_prompt_count(len(body.prompts), body.n, "prompt")
        request = service.sampling(body, body.max_tokens, "max_tokens")
        prompt_ids = service.encode(body.prompts, "prompt")
        header = fmt.AnswerHeader("cmpl", service.model_id)
        if body.stream:
            return event_stream(service, request, prompt_ids, body, header, chat=False)
        texts = await service.completion_texts(request, repeated(prompt_ids, body.n), body)
        return fmt.completion_answer(header, texts, fmt.usage(prompt_ids, texts))

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(
        body: ChatJson,
    ) -> dict[str, Any] | StreamingResponse:
        service.check_model(body.model)
        if not has_chat_template(service.generator.tokenizer):
            raise ApiError(
                400,
                "the policy's tokenizer has no chat template, so it cannot read chat messages (training "
                "refuses them too); send text to /v1/completions",
                param="messages",
                code="no_chat_template",
            )
        service.limits.check_prompt_count(1, body.n, "messages")
        request = service.sampling(body, body.new_tokens, "max_tokens")
        messages = [message.as_prompt_message() for message in body.messages]
        prompt_ids = service.encode([messages], "messages")
        header = fmt.AnswerHeader("chatcmpl", service.model_id)
        if body.stream:
            return event_stream(service, request, prompt_ids, body, header, chat=True)
        texts = await service.completion_texts(request, repeated(prompt_ids, body.n), body)
        return fmt.chat_answer(header, texts, fmt.usage(prompt_ids, texts))

    @app.post("/generate")
    async def generate(body: GenerateJson) -> dict[str, Any]:
        prompts = body.prompt_list
        service.limits.check_prompt_count(len(prompts), 1, "prompts")
        max_new_tokens = body.max_new_tokens or service.default_new_tokens
        service.limits.check_new_tokens(max_new_tokens, "max_new_tokens")
        prompt_ids = service.encode(prompts, "prompts")
        request = GenerationRequest(prompts, max_new_tokens, body.temperature, body.top_p)
        rows = await service.complete(request, prompt_ids)
        completions = [service.generator.describe(row) for row in rows]
        return {"model": str(service.generator.folder), "completions": completions}


def event_stream(
    service: Service,
    request: GenerationRequest,
    prompt_ids: list[list[int]],
    body: SamplingBody,
    header: fmt.AnswerHeader,
    chat: bool,
) -> StreamingResponse:
    """The answer as server-sent events: OpenAI's chunks as tokens arrive, usage if asked, then [DONE]."""
    rows = repeated(prompt_ids, body.n)
    texts = [service.new_text(body) for _ in rows]
    kind = "chat.completion.chunk" if chat else "text_completion"

    def chunk(index: int, piece: str, finish_reason: str | None) -> dict[str, Any]:
        if chat:
            return fmt.chat_chunk(header, index, {"content": piece} if piece else {}, finish_reason)
        return fmt.completion_chunk(header, index, piece, finish_reason)

    async def events() -> AsyncIterator[str]:
        if chat:
            for index in range(len(rows)):
                yield fmt.sse_event(fmt.chat_chunk(header, index, {"role": "assistant", "content": ""}, None))
        try:
            async for index, piece, finish_reason in service.stream(request, rows, texts):
                yield fmt.sse_event(chunk(index, piece, finish_reason))
        except Exception as err:  # noqa: BLE001 - the status line is sent: say so in the stream
            message = f"generation failed: {type(err).__name__}: {first_line(err)}"
            yield fmt.sse_event(
                {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
            )
            return
        if body.include_usage:
            yield fmt.sse_event(fmt.usage_chunk(header, kind, fmt.usage(prompt_ids, texts)))
        yield fmt.DONE_EVENT

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
