"""A schema error as one sentence: the dotted key, what is wrong, and the key the user probably meant."""

from __future__ import annotations

import difflib

from pydantic import BaseModel, ValidationError

from llm_rl.schema import Recipe, RuleBroken


def describe_validation_error(err: ValidationError, schema: type[BaseModel] | None = None) -> str:
    """One sentence for the first error: the dotted key, what is wrong, and a suggestion from `schema`."""
    first = err.errors()[0]
    broken = first.get("ctx", {}).get("error")
    if isinstance(broken, RuleBroken):
        return str(broken)
    loc = [str(p) for p in first["loc"]]
    dotted = format_location(loc)
    if first["type"] == "extra_forbidden":
        suggestion = suggest_key(schema or Recipe, loc)
        hint = f" (did you mean {suggestion!r}?)" if suggestion else ""
        return f"{dotted}: unknown key{hint}"
    given = first.get("input")
    if first["type"].endswith("_type") or first["type"] in {"literal_error", "model_type"}:
        return f"{dotted}: {first['msg'].lower()}, got {given!r}"
    return f"{dotted}: {first['msg'].lower()}"


def format_location(loc: list[str]) -> str:
    """['rewards', '0', 'weight'] -> 'rewards[0].weight'."""
    text = ""
    for part in loc:
        text += f"[{part}]" if part.isdigit() else (f".{part}" if text else part)
    return text


# Names users bring from other tools, for keys that difflib would not find.
KEY_SYNONYMS = {
    "rank": "r",
    "lora_r": "r",
    "lora_alpha": "alpha",
    "lora_dropout": "dropout",
    "lr": "learning_rate",
    "model_name_or_path": "policy",
    "batch_size": "per_device_batch_size",
    "per_device_train_batch_size": "per_device_batch_size",
    "max_completion_length": "max_new_tokens",
    "save_steps": "every",
}


def suggest_key(model: type[BaseModel], loc: list[str], extra: list[str] | None = None) -> str | None:
    """The closest valid key to an unknown one, found by walking the schema to its section (`extra`:
    more keys the section takes)."""
    for part in loc[:-1]:
        if part.isdigit():
            continue
        field = model.model_fields.get(part)
        annotation = getattr(field, "annotation", None)
        inner = getattr(annotation, "__args__", (annotation,))
        sections = [t for t in inner if isinstance(t, type) and issubclass(t, BaseModel)]
        if not sections:
            return None
        model = sections[0]
    synonym = KEY_SYNONYMS.get(loc[-1])
    if synonym in model.model_fields:
        return synonym
    matches = difflib.get_close_matches(loc[-1], [*model.model_fields, *(extra or [])], n=1, cutoff=0.6)
    return matches[0] if matches else None
