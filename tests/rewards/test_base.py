"""What every reward shares (llm_rl.rewards.base): the text of a completion, given as a string or as chat messages."""

from __future__ import annotations

import pytest

from llm_rl.errors import RewardError
from llm_rl.rewards import completion_text


def test_completion_text_takes_strings_and_the_last_assistant_message():
    assert completion_text("18") == "18"
    messages = [
        {"role": "assistant", "content": "first"},
        {"role": "user", "content": "more?"},
        {"role": "assistant", "content": "last"},
    ]
    assert completion_text(messages) == "last"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "parts"}]}]) == "parts"
    assert completion_text([]) == ""
    with pytest.raises(RewardError, match="a completion must be a string or a list of messages, got int"):
        completion_text(18)
