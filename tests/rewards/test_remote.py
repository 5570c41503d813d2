"""The `http` reward against a real HTTP server started by the test (http.server in a thread)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from llm_rl.errors import RewardError
from llm_rl.rewards import get_reward


class Service:
    """What the server answers, and what it received."""

    def __init__(self) -> None:
        self.failures_first = 0  # answer 503 this many times first
        self.status = 200
        self.body: bytes | None = None  # a fixed answer instead of the scores
        self.requests: list[dict] = []
        self.headers: list[dict] = []

    def answer(self, request: dict) -> tuple[int, bytes]:
        self.requests.append(request)
        if self.failures_first > 0:
            self.failures_first -= 1
            return 503, b"busy"
        if self.body is not None:
            return self.status, self.body
        # 1.0 when the completion equals the `answer` column.
        rewards = [
            float(c == a) for c, a in zip(request["completions"], request["columns"]["answer"], strict=True)
        ]
        return self.status, json.dumps({"rewards": rewards}).encode()


@pytest.fixture
def service() -> Iterator[tuple[Service, str]]:
    state = Service()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            state.headers.append(dict(self.headers))
            status, body = state.answer(json.loads(self.rfile.read(length)))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}/score"
    server.shutdown()
    server.server_close()


def call(reward, completions, **columns):
    return reward(prompts=["3+4="] * len(completions), completions=completions, **columns)


def test_scores_come_from_the_service_with_prompts_and_columns(service) -> None:
    state, url = service
    reward = get_reward("http", url=url)
    assert call(reward, ["7", "8"], answer=["7", "7"], trainer_state=object()) == [1.0, 0.0]
    (request,) = state.requests
    assert request == {
        "prompts": ["3+4=", "3+4="],
        "completions": ["7", "8"],
        "columns": {"answer": ["7", "7"]},
    }


def test_conversations_are_sent_as_messages(service) -> None:
    state, url = service
    reward = get_reward("http", url=url)
    messages = [[{"role": "assistant", "content": "7"}]]
    state.body = b"[0.5]"
    assert reward(prompts=[[{"role": "user", "content": "3+4="}]], completions=messages, answer=["7"]) == [
        0.5
    ]
    assert state.requests[0]["completions"] == messages


def test_a_busy_service_is_retried(service) -> None:
    state, url = service
    state.failures_first = 2
    reward = get_reward("http", url=url, retries=2, backoff=0.0)
    assert call(reward, ["7"], answer=["7"]) == [1.0]
    assert len(state.requests) == 3


def test_a_service_that_keeps_failing_is_a_clear_error(service) -> None:
    state, url = service
    state.failures_first = 10
    reward = get_reward("http", url=url, retries=1, backoff=0.0)
    with pytest.raises(
        RewardError,
        match=r"reward 'http' \(http://127.0.0.1:\d+/score\): the server answered 503: 'busy' \(after 2 attempts\)",
    ):
        call(reward, ["7"], answer=["7"])


def test_a_client_error_is_not_retried(service) -> None:
    state, url = service
    state.status, state.body = 400, b'{"error": "no answer column"}'
    reward = get_reward("http", url=url, retries=3, backoff=0.0)
    with pytest.raises(RewardError, match=r"answered 400: .*no answer column.*\(after 1 attempt\)"):
        call(reward, ["7"], answer=["7"])
    assert len(state.requests) == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "the answer is not JSON"),
        (b'{"scores": [1]}', "expected"),
        (b"[1, 2]", "2 rewards for 1 completions"),
    ],
)
def test_malformed_answers_are_named(service, body: bytes, message: str) -> None:
    state, url = service
    state.body = body
    with pytest.raises(RewardError, match=message):
        call(get_reward("http", url=url), ["7"], answer=["7"])


def test_a_server_that_is_not_there_times_out_or_refuses_clearly() -> None:
    reward = get_reward("http", url="http://127.0.0.1:9/score", retries=0, timeout=2.0)
    with pytest.raises(RewardError, match=r"ConnectionError|Timeout"):
        call(reward, ["7"], answer=["7"])


def test_headers_come_from_the_environment_and_stay_out_of_errors(service, monkeypatch) -> None:
    state, url = service
    monkeypatch.setenv("SCORER_TOKEN", "s3cret")
    reward = get_reward("http", url=url, headers_from_env={"Authorization": "SCORER_TOKEN"})
    call(reward, ["7"], answer=["7"])
    assert state.headers[0]["Authorization"] == "s3cret"
    monkeypatch.delenv("SCORER_TOKEN")
    with pytest.raises(RewardError, match="SCORER_TOKEN is not set") as raised:
        get_reward("http", url=url, headers_from_env={"Authorization": "SCORER_TOKEN"})
    assert "s3cret" not in str(raised.value)


def test_bad_urls_are_refused() -> None:
    with pytest.raises(RewardError, match=r"\.url: expected an http:// or https:// URL"):
        get_reward("http", url="ftp://example/score")


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_a_run_trains_on_the_service_rewards(service, tmp_path, algorithm: str) -> None:
    from llm_rl.recipe.load import load_recipe
    from llm_rl.run.training import train
    from llm_rl.run_folder import read_rows
    from tests.conftest import REPO

    state, url = service
    small = ["training.per_device_batch_size=16", "grpo.num_generations=4"] if algorithm == "grpo" else []
    recipe = load_recipe(
        REPO / "recipes" / "arithmetic" / f"{algorithm}.yaml",
        [f"rewards=[{{name: http, url: '{url}', alias: service}}]", "training.max_steps=2",
         f"run.output_dir={tmp_path}", "monitoring.wandb.mode=disabled", "monitoring.progress=false",
         "training.per_device_batch_size=16", *small],
    )  # fmt: skip
    assert train(recipe)["status"] == "completed"
    assert len(state.requests) >= 2
    sent = [c for request in state.requests for c in request["completions"]]
    expected = sum(
        c == a for r in state.requests for c, a in zip(r["completions"], r["columns"]["answer"], strict=True)
    )
    rows = read_rows(tmp_path)
    assert [row["rewards/service/mean"] for row in rows] and len(sent) == 2 * 16
    assert sum(row["rewards/service/mean"] for row in rows) * 16 == pytest.approx(expected)
