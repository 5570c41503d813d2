"""`http`: rewards from a service. Prompts, completions and the dataset columns are POSTed as JSON to a URL.

The request body is `{"prompts": [...], "completions": [...], "columns": {"answer": [...], ...}}`,
with conversations as lists of `{role, content}` messages. The service answers `{"rewards": [...]}` or
a bare list, one number (or null: not applicable) per completion. Connection errors, timeouts and 5xx
answers are retried with exponential back-off. A 4xx answer, a malformed answer, or a failure after the
last retry is an error naming the URL, what came back and after how many attempts. Secrets stay out
of the recipe: `headers_from_env: {Authorization: MY_TOKEN}` reads each header's value from an
environment variable when the reward is built, and values are never printed.
"""

from __future__ import annotations

import os
import time
from typing import Annotated, Any
from urllib.parse import urlparse

import requests
from pydantic import ConfigDict, Field, validate_call

from llm_rl.errors import RewardError
from llm_rl.rewards.base import RewardFunction, RewardParameterError, dataset_columns

STRICT = ConfigDict(strict=True)
# Answers worth retrying: the service may come back.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class RemoteReward:
    """Posts a batch to the service and returns its rewards (module docstring)."""

    __name__ = "http"

    def __init__(
        self, url: str, timeout: float, retries: int, backoff: float, headers: dict[str, str]
    ) -> None:
        self.url = url
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.session = requests.Session()
        self.session.headers.update(headers)

    def __call__(self, prompts: list[Any], completions: list[Any], completion_ids: Any = None, **kwargs: Any):
        body = {
            "prompts": prompts,
            "completions": completions,
            "columns": {name: list(kwargs[name]) for name in dataset_columns(kwargs)},
        }
        rewards = self.post(body)
        if len(rewards) != len(completions):
            raise RewardError(
                f"reward 'http' ({self.url}): {len(rewards)} rewards for {len(completions)} completions"
            )
        return rewards

    def post(self, body: dict[str, Any]) -> list[float | None]:
        """The service's rewards for one batch, retrying what may pass on a second try."""
        attempts = self.retries + 1
        for attempt in range(1, attempts + 1):
            try:
                response = self.session.post(self.url, json=body, timeout=self.timeout)
            except (requests.ConnectionError, requests.Timeout) as err:
                problem = f"{type(err).__name__}: {err}"
            else:
                if response.status_code < 400:
                    return self.read(response)
                problem = f"the server answered {response.status_code}: {response.text[:200]!r}"
                if response.status_code not in RETRY_STATUSES:
                    break
            if attempt < attempts:
                time.sleep(self.backoff * 2 ** (attempt - 1))
        tries = f"{attempt} attempt" + ("s" if attempt > 1 else "")
        raise RewardError(f"reward 'http' ({self.url}): {problem} (after {tries})")

    def read(self, response: requests.Response) -> list[float | None]:
        """The rewards in an answer: `{"rewards": [...]}` or a bare list."""
        try:
            answer = response.json()
        except ValueError:
            raise RewardError(
                f"reward 'http' ({self.url}): the answer is not JSON: {response.text[:200]!r}"
            ) from None
        rewards = answer.get("rewards") if isinstance(answer, dict) else answer
        if not isinstance(rewards, list):
            raise RewardError(
                f"reward 'http' ({self.url}): expected {{\"rewards\": [...]}} or a list, got {response.text[:200]!r}"
            )
        return rewards


@validate_call(config=STRICT)
def http_reward(
    url: str,
    timeout: Annotated[float, Field(gt=0)] = 30.0,
    retries: Annotated[int, Field(ge=0)] = 2,
    backoff: Annotated[float, Field(ge=0)] = 1.0,
    headers: dict[str, str] | None = None,
    headers_from_env: dict[str, str] | None = None,
) -> RewardFunction:
    """Rewards from the service at `url` (module docstring): `timeout` seconds per request, `retries`
    more attempts after the first, `backoff` seconds before the first retry (doubling after)."""
    if urlparse(url).scheme not in ("http", "https") or not urlparse(url).netloc:
        raise RewardParameterError("url", f"expected an http:// or https:// URL, got {url!r}")
    all_headers = dict(headers or {})
    for header, variable in (headers_from_env or {}).items():
        value = os.environ.get(variable)
        if value is None:
            raise RewardParameterError(
                "headers_from_env", f"{header}: the environment variable {variable} is not set"
            )
        all_headers[header] = value
    return RemoteReward(url, timeout, retries, backoff, all_headers)
