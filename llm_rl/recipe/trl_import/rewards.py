"""A flat TRL-style file's rewards (`reward_funcs`, `reward_model_name_or_path`, `reward_weights`) as our
`rewards:` list, and open-r1's settings of its own reward functions."""

from __future__ import annotations

import copy
from typing import Any

from llm_rl.errors import RecipeError
from llm_rl.recipe.accounting import Migration

# open-r1's settings of its own reward functions (GRPOScriptArguments).
OPEN_R1_REWARD_SETTINGS = {
    "cosine_min_value_wrong", "cosine_max_value_wrong", "cosine_min_value_correct",
    "cosine_max_value_correct", "cosine_max_len", "repetition_n_grams", "repetition_max_penalty",
    "code_language", "code_eval_test_batch_size", "code_eval_scoring_mode", "parallel_code_exec_per_proc",
    "e2b_router_url", "morph_router_url", "code_provider", "ioi_provider", "max_completion_len",
    "soft_punish_cache", "enforce_same_language",
}  # fmt: skip
OPEN_R1_REWARD_NOTE = (
    "a setting of one of open-r1's reward functions: give it as a key of that reward's rewards: entry "
    "(your function by import path receives the entry's keys)"
)

# Reward names of TRL's grpo script and open-r1 -> our reward entry (without weight), and a note.
FLAT_REWARDS: dict[str, tuple[dict[str, Any], str]] = {
    "accuracy": (
        {"name": "accuracy", "answer_column": "solution"},
        "math-verify against the `solution` column",
    ),
    "accuracy_reward": ({"name": "accuracy", "answer_column": "solution"}, "math-verify against `solution`"),
    "format": ({"name": "format"}, "open-r1's <think>/<answer> format (our default pattern)"),
    "think_format_reward": (
        {"name": "format", "pattern": r"^<think>(?!.*<think>)(.*?)</think>.*$", "alias": "think_format"},
        "TRL's think_format_reward pattern",
    ),
}


def import_rewards(flat: dict[str, Any], out: Migration) -> None:
    """`reward_model_name_or_path`, `reward_funcs` and `reward_weights` as our `rewards:` list."""
    names = list(flat.get("reward_funcs") or [])
    weights = flat.get("reward_weights")
    entries: list[dict[str, Any]] = []
    path = flat.get("reward_model_name_or_path")
    if path:
        entries.append({"name": "reward_model", "path": path})
        out.keep("reward_model_name_or_path", path, "rewards[0] (reward_model)")
    elif "reward_model_name_or_path" in flat:
        out.keep("reward_model_name_or_path", path, "-", "no reward model")
    if "reward_funcs" in flat and not names:
        out.keep("reward_funcs", flat["reward_funcs"], "-", "no reward functions named")
    for name in names:
        index = len(entries)
        if name in FLAT_REWARDS:
            entry, note = FLAT_REWARDS[name]
            entries.append(copy.deepcopy(entry))
            out.keep(f"reward_funcs: {name}", name, f"rewards[{index}] ({entry['name']})", note)
        elif ":" in name or "." in name:
            module, _, function = name.rpartition(":" if ":" in name else ".")
            entries.append({"name": f"{module}:{function}"})
            out.keep(f"reward_funcs: {name}", name, f"rewards[{index}]", "your function, by import path")
        else:
            entries.append({"name": name})
            out.warn(
                f"reward_funcs: {name}",
                name,
                "no built-in of this name: name your implementation as package.module:function",
                f"rewards[{index}]",
            )
    if weights is not None:
        if len(weights) != len(entries):
            raise RecipeError(f"reward_weights: {len(weights)} weights for {len(entries)} reward functions")
        for entry, weight in zip(entries, weights, strict=True):
            entry["weight"] = float(weight)
        out.keep("reward_weights", weights, "rewards[].weight")
    if entries:
        out.recipe["rewards"] = entries
