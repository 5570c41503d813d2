"""What one request may ask of the server, and the 4xx answer that names each limit when crossed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llm_rl.tools.serve.errors import ApiError


@dataclass(frozen=True)
class ServeLimits:
    """The most a request may ask; more is a 400 (413 for the body) naming the limit and its flag."""

    max_body_bytes: int = 1 << 20
    max_prompts: int = 64
    max_prompt_tokens: int = 2048
    max_new_tokens: int = 512
    # How long the batcher waits for more requests to join a batch, and the largest batch it makes.
    batch_wait_seconds: float = 0.01
    max_batch_prompts: int = 64

    @classmethod
    def from_flags(cls, flags: Any) -> ServeLimits:
        """The limits `llm-rl serve`'s flags set (`--max-body-bytes`, `--batch-wait-ms`, ...)."""
        return cls(
            max_body_bytes=flags.max_body_bytes,
            max_prompts=flags.max_prompts,
            max_prompt_tokens=flags.max_prompt_tokens,
            max_new_tokens=flags.max_new_tokens,
            batch_wait_seconds=flags.batch_wait_ms / 1000,
        )

    def body_too_large(self, size: int, exact: bool = True) -> ApiError:
        """413 for a body of `size` bytes (at least `size` when the client sent no length)."""
        amount = f"{size}" if exact else f"more than {self.max_body_bytes}"
        return ApiError(
            413,
            f"a body of {amount} bytes; the limit is {self.max_body_bytes} (--max-body-bytes)",
            code="body_too_large",
        )

    def check_prompt_count(self, prompts: int, n: int, param: str) -> None:
        """Prompts times completions per prompt, against --max-prompts."""
        count = prompts * n
        if count <= self.max_prompts:
            return
        what = f"{count} prompts" if n == 1 else f"{count} completions ({prompts} prompts x n={n})"
        raise ApiError(
            400,
            f"{what} in one request; the limit is {self.max_prompts} (--max-prompts)",
            param=param if n == 1 else "n",
            code="too_many_prompts",
        )

    def check_new_tokens(self, value: int, param: str) -> None:
        """Tokens to generate, against --max-new-tokens."""
        if value > self.max_new_tokens:
            raise ApiError(
                400,
                f"{param!r} is {value}; the limit is {self.max_new_tokens} (--max-new-tokens)",
                param=param,
                code="max_tokens_limit",
            )

    def check_prompt_tokens(self, prompt_ids: list[list[int]], param: str) -> None:
        """The longest prompt, formatted as in training, against --max-prompt-tokens."""
        longest = max(len(ids) for ids in prompt_ids)
        if longest > self.max_prompt_tokens:
            raise ApiError(
                400,
                f"a prompt of {longest} tokens; the limit is {self.max_prompt_tokens} (--max-prompt-tokens)",
                param=param,
                code="context_length_exceeded",
            )
