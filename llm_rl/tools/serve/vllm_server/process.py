"""vLLM's server as a supervised child process: its port, its health, the signals handed on to it, and
its stop."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

from llm_rl.errors import UserInputError
from llm_rl.tools.serve.server import listening_socket
from llm_rl.tools.serve.vllm_server.log import ServerLog

HEALTH_POLL_SECONDS = 0.5
# How long a server asked to stop may take before it is killed.
STOP_SECONDS = 60.0


def reserve_port(host: str, port: int) -> tuple[str, int]:
    """The address the server will listen on: `port` (a free one for 0), found free now; a
    `UserInputError` naming `--port` when it is taken."""
    try:
        with listening_socket(host, port) as probe:
            bound_host, bound_port = probe.getsockname()[:2]
    except OSError as err:
        raise UserInputError(f"--port {port}: cannot serve on {host}: {err.strerror}") from None
    return bound_host, bound_port


def base_url(host: str, port: int) -> str:
    """Where this machine reaches a server listening on (host, port): loopback for the any-addresses."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def answers_health(url: str) -> bool:
    """Whether GET url/health answers 200 now."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


class ServerProcess:
    """vLLM's server as a child process in a session of its own (a terminal's Ctrl-C reaches it once,
    through `hand_on`), its output copied by a `ServerLog`."""

    def __init__(self, command: list[str], environment: dict[str, str], api_key: str | None) -> None:
        self.log = ServerLog(api_key)
        self.process = subprocess.Popen(
            command,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        self.copier = threading.Thread(target=self.log.copy, args=(self.process.stdout,), daemon=True)
        self.copier.start()
        self.stop_asked_at: float | None = None

    def hand_on(self, signum: int, _frame: object = None) -> None:
        """A signal handler: the signal to the child, which then stops."""
        if self.stop_asked_at is None:
            self.stop_asked_at = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signum)

    def running(self) -> bool:
        """Whether the child still runs; one asked to stop that has not within STOP_SECONDS is killed."""
        if self.process.poll() is not None:
            return False
        if self.stop_asked_at is not None and time.monotonic() - self.stop_asked_at > STOP_SECONDS:
            self.process.kill()
        return True

    def wait_until_healthy(self, url: str) -> bool:
        """True once the child answers GET /health; False when it exits first."""
        while self.running():
            if answers_health(url):
                return True
            time.sleep(HEALTH_POLL_SECONDS)
        return False

    def wait(self) -> int:
        """The child's exit code, once it has exited and its last output is copied."""
        while self.running():
            time.sleep(HEALTH_POLL_SECONDS)
        self.copier.join(timeout=10)
        return self.process.returncode


@contextlib.contextmanager
def signals_handed_on(server: ServerProcess) -> Iterator[None]:
    """While serving, SIGINT and SIGTERM go to the child instead of stopping this process."""
    previous = {number: signal.signal(number, server.hand_on) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
