"""The answers of the OpenAI endpoints, in OpenAI's shapes: whole completions and chat completions, their
streamed chunks (server-sent events ending in `data: [DONE]`), the usage counts and the model list."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

from llm_rl.tools.serve.decoding import CompletionText

DONE_EVENT = "data: [DONE]\n\n"


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def sse_event(payload: dict[str, Any]) -> str:
    """One server-sent event carrying a JSON object."""
    return f"data: {json.dumps(payload)}\n\n"


def usage(prompt_ids: Sequence[Sequence[int]], texts: Sequence[CompletionText]) -> dict[str, int]:
    """Token counts: each prompt once (however many completions it has), every completion's tokens."""
    prompt_tokens = sum(len(ids) for ids in prompt_ids)
    completion_tokens = sum(text.tokens for text in texts)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def model_list(model_id: str, created: int) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [{"id": model_id, "object": "model", "created": created, "owned_by": "llm-rl"}],
    }


class AnswerHeader:
    """What every answer and chunk of one request repeats: its id, time and model."""

    def __init__(self, prefix: str, model_id: str) -> None:
        self.id = new_id(prefix)
        self.created = int(time.time())
        self.model = model_id

    def fields(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}


def completion_answer(
    header: AnswerHeader, texts: Sequence[CompletionText], counts: dict[str, int]
) -> dict[str, Any]:
    """`POST /v1/completions`' whole answer."""
    choices = [
        {"index": index, "text": text.text, "finish_reason": text.finish_reason, "logprobs": None}
        for index, text in enumerate(texts)
    ]
    return {**header.fields("text_completion"), "choices": choices, "usage": counts}


def completion_chunk(
    header: AnswerHeader, index: int, piece: str, finish_reason: str | None
) -> dict[str, Any]:
    """One streamed piece of a completion."""
    choice = {"index": index, "text": piece, "finish_reason": finish_reason, "logprobs": None}
    return {**header.fields("text_completion"), "choices": [choice]}


def chat_answer(
    header: AnswerHeader, texts: Sequence[CompletionText], counts: dict[str, int]
) -> dict[str, Any]:
    """`POST /v1/chat/completions`' whole answer."""
    choices = [
        {
            "index": index,
            "message": {"role": "assistant", "content": text.text},
            "finish_reason": text.finish_reason,
            "logprobs": None,
        }
        for index, text in enumerate(texts)
    ]
    return {**header.fields("chat.completion"), "choices": choices, "usage": counts}


def chat_chunk(
    header: AnswerHeader, index: int, delta: dict[str, str], finish_reason: str | None
) -> dict[str, Any]:
    """One streamed piece of a chat answer: the role first, then content, then the finish reason."""
    choice = {"index": index, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
    return {**header.fields("chat.completion.chunk"), "choices": [choice]}


def usage_chunk(header: AnswerHeader, kind: str, counts: dict[str, int]) -> dict[str, Any]:
    """The last chunk before [DONE] when the client asked for `stream_options.include_usage`."""
    return {**header.fields(kind), "choices": [], "usage": counts}
