"""One thread that runs the policy: requests that arrive together share one generate call.

Requests with the same length limit and sampling settings that arrive within `batch_wait_seconds` of
each other are generated as one batch; a streamed request also hears each of its tokens as generate
makes it. The batch sizes are counted, for `/health`.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.generation.streamers import BaseStreamer

from llm_rl.models.completions import trimmed
from llm_rl.tools.sample import GenerationRequest, PolicyGenerator
from llm_rl.tools.serve.limits import ServeLimits

# Called from the batcher's thread with (the row within the request, a new token id).
TokenListener = Callable[[int, int], None]

RECENT_BATCHES = 100


@dataclass
class Pending:
    """A request waiting for its completions: one row of token ids per prompt."""

    request: GenerationRequest
    prompt_ids: list[list[int]]
    on_token: TokenListener | None = None
    result: Future = field(default_factory=Future)


@dataclass
class BatchStats:
    """What the batcher has done: requests answered, generate calls, and the recent batch sizes."""

    requests: int = 0
    batches: int = 0
    prompts: int = 0
    largest_batch: int = 0
    recent: deque[int] = field(default_factory=lambda: deque(maxlen=RECENT_BATCHES))

    def count(self, requests: int, prompts: int) -> None:
        self.requests += requests
        self.batches += 1
        self.prompts += prompts
        self.largest_batch = max(self.largest_batch, prompts)
        self.recent.append(prompts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "batches": self.batches,
            "prompts": self.prompts,
            "largest_batch": self.largest_batch,
            "recent_batch_sizes": list(self.recent),
        }


class RowStreamer(BaseStreamer):
    """Hands each token generate makes to the listener of the request its batch row belongs to."""

    def __init__(self, rows: list[tuple[TokenListener, int] | None]) -> None:
        self.rows = rows

    def put(self, value: torch.Tensor) -> None:
        if value.dim() != 1:  # generate's first call: the prompts
            return
        for row, token in enumerate(value.tolist()):
            listener = self.rows[row]
            if listener is not None:
                listener[0](listener[1], token)

    def end(self) -> None:
        pass


class Batcher:
    """The thread that runs the generator, fed by `submit`."""

    def __init__(self, generator: PolicyGenerator, limits: ServeLimits) -> None:
        self.generator = generator
        self.limits = limits
        self.inbox: queue.Queue[Pending] = queue.Queue()
        self.stats = BatchStats()
        self._thread = threading.Thread(target=self._run, daemon=True, name="llm-rl-batcher")
        self._thread.start()

    def submit(
        self, request: GenerationRequest, prompt_ids: list[list[int]], on_token: TokenListener | None = None
    ) -> Future:
        """Queue prompts for generation; the future gives each prompt's completion ids (trimmed after the
        first stop token)."""
        pending = Pending(request, prompt_ids, on_token)
        self.inbox.put(pending)
        return pending.result

    def _run(self) -> None:
        while True:
            for group in self._by_settings(self._collect()):
                self._generate(group)

    def _collect(self) -> list[Pending]:
        """The next request, and those that follow it within the wait, up to the batch limit."""
        batch = [self.inbox.get()]
        size = len(batch[0].prompt_ids)
        while size < self.limits.max_batch_prompts:
            try:
                more = self.inbox.get(timeout=self.limits.batch_wait_seconds)
            except queue.Empty:
                break
            batch.append(more)
            size += len(more.prompt_ids)
        return batch

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
            responses = self.generator.generate_ids(prompt_ids, group[0].request, self._streamer(group))
        except Exception as err:  # noqa: BLE001 - every waiting request gets the failure
            for pending in group:
                pending.result.set_exception(err)
            return
        rows = trimmed(responses, self.generator.stop_token_ids)
        self.stats.count(len(group), len(prompt_ids))
        start = 0
        for pending in group:
            count = len(pending.prompt_ids)
            pending.result.set_result(rows[start : start + count])
            start += count

    @staticmethod
    def _streamer(group: list[Pending]) -> RowStreamer | None:
        """A streamer for the batch when any of its requests listens to tokens, else none."""
        if all(pending.on_token is None for pending in group):
            return None
        rows: list[tuple[TokenListener, int] | None] = []
        for pending in group:
            for index in range(len(pending.prompt_ids)):
                rows.append((pending.on_token, index) if pending.on_token is not None else None)
        return RowStreamer(rows)
