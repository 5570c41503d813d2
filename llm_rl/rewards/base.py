"""What every reward module shares: the reward callable's type, completion text, parameter errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llm_rl.errors import RewardError

# TRL's GRPO signature: fn(prompts, completions, completion_ids=None, **dataset_columns) -> one value
# per completion, None meaning "not applicable to this sample".
RewardFunction = Callable[..., list[float | None]]

# Keyword arguments TRL's GRPOTrainer adds next to the dataset columns.
TRAINER_KWARGS = frozenset({"trainer_state", "log_extra", "log_metric", "environments"})


class RewardParameterError(RewardError):
    """A bad parameter of a reward factory; the builder prefixes the recipe key (`rewards[i].<key>`)."""

    def __init__(self, key: str, detail: str) -> None:
        self.key = key
        self.detail = detail
        super().__init__(f"{key}: {detail}")


def message_text(message: Any) -> str:
    """The text of one chat message, whose content may be a string or a list of typed parts."""
    content = message.get("content") if isinstance(message, dict) else message
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    raise RewardError(f"message content must be a string or a list of parts, got {type(content).__name__}")


def completion_text(completion: Any) -> str:
    """A completion as text: a string as it is, a message list as its last assistant message's content."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return message_text(completion)
    if isinstance(completion, list):
        if not completion:
            return ""
        replies = [m for m in completion if isinstance(m, dict) and m.get("role") == "assistant"]
        return message_text((replies or completion)[-1])
    raise RewardError(f"a completion must be a string or a list of messages, got {type(completion).__name__}")


def is_conversational(value: Any) -> bool:
    """True for a list of chat messages (TRL's conversational format), False for plain text."""
    return isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value)


def dataset_columns(kwargs: dict[str, Any]) -> list[str]:
    """The dataset columns among a reward call's keyword arguments (TRL's own extras left out)."""
    return sorted(key for key in kwargs if key not in TRAINER_KWARGS)
