"""What vLLM's server is started on: the policy's weights and tokenizer folder, the engine's settings, the
model id, and the run's chat template with the recipe's system prompt."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from transformers import AutoTokenizer

from llm_rl.data.prompts import has_chat_template
from llm_rl.errors import ModelError, first_line
from llm_rl.generation.vllm_settings import EngineSettings, architecture_problem, folder_engine_settings
from llm_rl.models.load import is_adapter_folder, merged_adapter_path
from llm_rl.schema import Recipe
from llm_rl.tools.export import policy_folder
from llm_rl.tools.sample import run_recipe
from llm_rl.tools.serve.server import default_model_id


@dataclass(frozen=True)
class ServedPolicy:
    """What vLLM's server is started on: the engine's settings (weights, tokenizer folder, precision, ...),
    the model id, and the run's chat template with its system prompt (None: the tokenizer has no template)."""

    engine: EngineSettings
    model_id: str
    chat_template: str | None


def served_policy(source: Path, model_name: str | None) -> ServedPolicy:
    """The policy at `source` as vLLM's server will load it; a `ModelError` (exit 2) for a folder that is
    no policy, a tokenizer that does not load, or an architecture vLLM does not implement."""
    folder = policy_folder(source)
    recipe = run_recipe(folder) or Recipe()
    weights = merged_adapter_path(folder) if is_adapter_folder(folder) else folder
    problem = architecture_problem(weights, recipe.model.trust_remote_code)
    if problem is not None:
        raise ModelError(f"--backend vllm: {problem}; serve it with --backend hf", where=str(folder))
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=recipe.model.trust_remote_code)
        template = tokenizer.get_chat_template() if has_chat_template(tokenizer) else None
    except Exception as err:  # noqa: BLE001 - any failure: the tokenizer cannot serve
        raise ModelError(f"the tokenizer does not load: {first_line(err)}", where=str(folder)) from None
    return ServedPolicy(
        engine=folder_engine_settings(folder, weights, recipe),
        model_id=model_name or default_model_id(source),
        chat_template=None
        if template is None
        else system_prompt_template(template, recipe.data.system_prompt),
    )


def system_prompt_template(template: str, system: str | None) -> str:
    """`template` with `system` put first in a conversation that opens with no system message, as training
    formats prompts (`format_prompt`); `template` itself without a system prompt.

    The prompt is written as a Jinja string literal (JSON's escapes are Jinja's). Templates render with
    `trim_blocks`, which drops the first newline after the added block: a template that opens with one
    gets it back."""
    if system is None:
        return template
    literal = json.dumps(system, ensure_ascii=False)
    prefix = (
        "{%- if messages and messages[0]['role'] != 'system' -%}"
        f"{{%- set messages = [{{'role': 'system', 'content': {literal}}}] + messages -%}}"
        "{%- endif %}"
    )
    return prefix + ("\n" if template.startswith("\n") else "") + template
