"""The request bodies the server takes, as pydantic models: OpenAI's completions and chat completions (the
fields this server honours), and `/generate`'s.

Every model forbids fields it does not know (a 422 that names the field): a sampling setting the server
would silently ignore, such as `logprobs` or `presence_penalty`, is better refused than misread. Types are
strict (`"0.5"` is not a temperature).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TextPart(Body):
    """One part of a message's content, as OpenAI's clients send it; text only."""

    type: Literal["text"]
    text: str


class ChatMessage(Body):
    role: Literal["system", "user", "assistant"]
    content: str | list[TextPart]
    # OpenAI's optional participant name; the chat template does not read it.
    name: str | None = None

    def as_prompt_message(self) -> dict[str, str]:
        """The {role, content} message the chat template reads, text parts joined."""
        content = self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)
        return {"role": self.role, "content": content}


class StreamOptions(Body):
    include_usage: bool = False


class SamplingBody(Body):
    """What the OpenAI endpoints share: the model, how to sample, how many, where to stop, streaming."""

    model: str
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = Field(1, ge=1)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # OpenAI's end-user id, accepted and unused.
    user: str | None = None

    @property
    def stop_strings(self) -> list[str]:
        """The stop sequences as a list, empty ones dropped."""
        stops = [self.stop] if isinstance(self.stop, str) else self.stop or []
        return [stop for stop in stops if stop]

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @model_validator(mode="after")
    def check_stop(self) -> SamplingBody:
        if len(self.stop_strings) > 4:
            raise ValueError("'stop' takes at most 4 sequences")
        return self


class CompletionBody(SamplingBody):
    """`POST /v1/completions`: one text prompt or a list of them."""

    prompt: str | list[str]

    @property
    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else self.prompt

    @model_validator(mode="after")
    def check_prompts(self) -> CompletionBody:
        if not self.prompts or not all(self.prompts):
            raise ValueError("'prompt' must be non-empty text or a non-empty list of non-empty texts")
        return self


class ChatBody(SamplingBody):
    """`POST /v1/chat/completions`: one conversation, answered as the assistant."""

    messages: list[ChatMessage] = Field(min_length=1)
    # OpenAI's newer name for max_tokens; it wins when both are given.
    max_completion_tokens: int | None = Field(None, ge=1)

    @property
    def new_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class GenerateBody(Body):
    """`POST /generate`: `prompt` (one) or `prompts` (a list), each text or chat messages."""

    prompt: Any = None
    prompts: Any = None
    max_new_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)

    @property
    def prompt_list(self) -> list[Any]:
        return [self.prompt] if self.prompt is not None else self.prompts

    @model_validator(mode="after")
    def check_prompts(self) -> GenerateBody:
        if (self.prompt is None) == (self.prompts is None):
            raise ValueError("give one of 'prompt' (one prompt) or 'prompts' (a list)")
        prompts = self.prompt_list
        if not isinstance(prompts, list) or not prompts:
            raise ValueError("'prompts' must be a non-empty list")
        for index, prompt in enumerate(prompts):
            if not is_prompt(prompt):
                raise ValueError(
                    f"prompt {index}: must be text or a list of {{role, content}} messages with text content"
                )
        return self


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
