"""One completion's text built from its tokens as they arrive, for streamed and whole answers alike.

A completion ends at its first stop token (`finish_reason` "stop"), at the first of the request's stop
strings (cut before it, also "stop"), or at the length limit ("length"). While it runs, the text handed
out holds back what could still turn out to be the start of a stop string, or half of a character.
"""

from __future__ import annotations

from collections.abc import Collection

from transformers import PreTrainedTokenizerBase

REPLACEMENT_CHARACTER = "\ufffd"


class CompletionText:
    """The text of one completion so far, and what of it has been handed out."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        stop_token_ids: Collection[int],
        stop_strings: list[str],
        incremental: bool,
    ) -> None:
        self.tokenizer = tokenizer
        self.stop_token_ids = set(stop_token_ids)
        self.stop_strings = stop_strings
        # Decode after every token (streaming, or stop strings to find): else once, at the end.
        self.incremental = incremental or bool(stop_strings)
        self.ids: list[int] = []
        self.text = ""
        self.sent = 0
        self.finish_reason: str | None = None

    @property
    def tokens(self) -> int:
        """Tokens generated for the text, the stop token included (what usage counts)."""
        return len(self.ids)

    def add(self, token: int) -> None:
        """One more generated token; ignored once the completion has ended."""
        if self.finish_reason is not None:
            return
        self.ids.append(token)
        if token in self.stop_token_ids:
            self.finish_reason = "stop"
            self._decode()
        elif self.incremental:
            self._decode()

    def add_all(self, tokens: list[int]) -> None:
        for token in tokens:
            self.add(token)

    def close(self) -> None:
        """The generator is done with this completion: without a stop, it ran into the length limit."""
        if self.finish_reason is None:
            self._decode()
        if self.finish_reason is None:
            self.finish_reason = "length"

    def delta(self) -> str:
        """The text not handed out yet that can no longer change."""
        end = len(self.text) if self.finish_reason is not None else len(self.text) - self._held_back()
        if end <= self.sent:
            return ""
        piece, self.sent = self.text[self.sent : end], end
        return piece

    def _decode(self) -> None:
        ids = self.ids[:-1] if self.ids and self.ids[-1] in self.stop_token_ids else self.ids
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        cuts = [text.find(stop) for stop in self.stop_strings if stop in text]
        if cuts:
            text = text[: min(cuts)]
            self.finish_reason = "stop"
        self.text = text

    def _held_back(self) -> int:
        """Characters at the end of the text that may yet change: half a character, or a stop's start."""
        if self.text.endswith(REPLACEMENT_CHARACTER):
            return len(self.text) - len(self.text.rstrip(REPLACEMENT_CHARACTER))
        held = 0
        for stop in self.stop_strings:
            for size in range(min(len(stop) - 1, len(self.text)), held, -1):
                if self.text.endswith(stop[:size]):
                    held = size
                    break
        return held
