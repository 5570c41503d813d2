"""The output of vLLM's server, relayed to our stderr with the API key masked, and the cause of a failure
read from it."""

from __future__ import annotations

import re
import sys
from typing import IO

# vLLM's prefix on its log lines: "(EngineCore pid=12) ERROR 12-05 18:13:35 [core.py:1510] ".
LOG_PREFIX = re.compile(r"^(\(\w+ pid=\d+\)\s+)?([A-Z]+ \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]*\]\s*)?")
EXCEPTION_LINE = re.compile(r"^(\w+\.)*\w*(Error|Exception): \S")


class ServerLog:
    """The child's output, copied line by line to our stderr with the API key masked; keeps the first
    exception line it printed (the cause of a failure, before the tracebacks that follow it) and the last."""

    def __init__(self, secret: str | None) -> None:
        self.secret = secret
        self.first_exception: str | None = None
        self.last_line = ""

    def copy(self, stream: IO[str]) -> None:
        for line in stream:
            if self.secret:
                line = line.replace(self.secret, "[api key]")
            sys.stderr.write(line)
            sys.stderr.flush()
            self.note(line)

    def note(self, line: str) -> None:
        text = LOG_PREFIX.sub("", line.strip(), count=1)
        if not text:
            return
        self.last_line = text
        if self.first_exception is None and EXCEPTION_LINE.match(text):
            self.first_exception = text

    def cause(self) -> str:
        return self.first_exception or self.last_line or "it printed nothing"
