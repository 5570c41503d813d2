"""TRL's PPO runs (trl 0.9-1.12: `examples/scripts/ppo/ppo.py`, `ppo_tldr.py` and scripts built on the
same `HfArgumentParser((ScriptArguments, PPOConfig, ModelConfig))`) imported as a PPO recipe that does
what TRL's scripts did, each key accounted for.

TRL deleted its PPOTrainer in 1.13. What its scripts did matters as much as the keys, so the recipe says
it: the policy and the reference load from `sft_model_path`, the tokenizer from `model_name_or_path`;
the reward is the reward model at `reward_model_path`, and the critic starts from that reward model;
no stop token unless `stop_token: eos` (completions run to `response_length`); one optimizer for policy
and critic (the critic's learning rate is the policy's); no gradient clipping; a log row every update.
TRL 1.12's defaults are written where llm_rl's differ. Sources: TRL's own code at those releases.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llm_rl.recipe.accounting import Migration, put
from llm_rl.recipe.trl_import.cadence import import_resume, import_saving
from llm_rl.recipe.trl_import.ppo_keys import (
    DATA_LIKE_FLAGS,
    PPO_NOT_USED,
    PPO_SECTION_KEYS,
    SHARED_KEYS,
    TRL_DEFAULT_MODEL,
    TRL_PPO_DEFAULTS,
)
from llm_rl.recipe.trl_import.shared_args import (
    FLAT_SWITCHES,
    import_dtype,
    import_precision,
    import_reporting,
    import_switch,
)


def import_trl_ppo(flat: dict[str, Any], script: str | None = None) -> Migration:
    """TRL PPO settings (a launch command's flags, typed, or a YAML/JSON of the same fields) as our PPO
    recipe; `script` is the launched script's path when there is one."""
    out = Migration({"algorithm": "ppo"})
    flat = legacy_renames(flat, out)
    import_models(flat, out)
    import_data(flat, script, out)
    import_precision(flat, out)
    import_reporting(flat, out)
    import_saving(flat, out)
    import_resume(flat, out)
    import_behaviour(flat, out)
    handled = {
        "sft_model_path", "reward_model_path", "model_name_or_path", "dataset_train_split", "bf16", "fp16", "report_to",
        "save_strategy", "save_steps", "resume_from_checkpoint", "num_mini_batches", "stop_token",
        "non_eos_penalty", "penalty_reward_value",
        "gradient_checkpointing", "max_grad_norm", "logging_steps",
    }  # fmt: skip
    for key, value in flat.items():
        if key in handled:
            continue
        if key in SHARED_KEYS:
            put(out.recipe, SHARED_KEYS[key], value)
            out.keep(key, value, SHARED_KEYS[key])
        elif key in PPO_SECTION_KEYS:
            put(out.recipe, f"ppo.{key}", value)
            out.keep(key, value, f"ppo.{key}")
        elif key in ("torch_dtype", "dtype"):
            import_dtype(key, value, out)
        elif key in FLAT_SWITCHES:
            import_switch(key, value, out)
        elif key in PPO_NOT_USED:
            out.warn(key, value, f"not used: {PPO_NOT_USED[key]}")
        else:
            out.warn(key, value, unknown_flag_note(key))
    import_trl_defaults(flat, out)
    return out


def legacy_renames(flat: dict[str, Any], out: Migration) -> dict[str, Any]:
    """`non_eos_penalty` (trl 0.9-0.10) as `missing_eos_penalty`, with what changed."""
    if "non_eos_penalty" not in flat:
        return flat
    flat = dict(flat)
    value = flat["non_eos_penalty"]
    replaced = flat.get("penalty_reward_value", -1)
    if value and "missing_eos_penalty" not in flat:
        flat["missing_eos_penalty"] = 1.0
        out.warn(
            "non_eos_penalty",
            value,
            f"trl 0.9-0.10 replaced the score of a completion without EOS by penalty_reward_value ({replaced}); "
            "trl 0.11 and llm_rl subtract missing_eos_penalty from it: 1.0, as TRL's examples then set",
            "ppo.missing_eos_penalty",
        )
    else:
        out.keep("non_eos_penalty", value, "-", "off")
    if "penalty_reward_value" in flat:
        out.keep("penalty_reward_value", replaced, "-", "see non_eos_penalty")
    return flat


def import_models(flat: dict[str, Any], out: Migration) -> None:
    """The policy and its reference from `sft_model_path`, the tokenizer from `model_name_or_path`, the
    reward and the critic from `reward_model_path`: what TRL's scripts loaded."""
    policy = flat.get("sft_model_path", TRL_DEFAULT_MODEL)
    reward = flat.get("reward_model_path", TRL_DEFAULT_MODEL)
    put(out.recipe, "model.policy", policy)
    put(out.recipe, "rewards", [{"name": "reward_model", "path": reward, "read": "tokens"}])
    put(out.recipe, "ppo.value_model", "reward_model")
    for key, value, target, note in (
        ("sft_model_path", policy, "model.policy", "the policy and PPO's reference model"),
        (
            "reward_model_path",
            reward,
            "rewards[0] (reward_model)",
            "the reward: its score of the prompt's and completion's token ids as generated (read: tokens)",
        ),
        (
            "(value model)",
            reward,
            "ppo.value_model",
            "reward_model: TRL's critic started from the reward model",
        ),
    ):
        default = key in ("sft_model_path", "reward_model_path") and key not in flat
        out.keep(f"{key} (TRL default)" if default else key, value, target, note)
    tokenizer = flat.get("model_name_or_path")
    if tokenizer is not None and tokenizer != policy:
        put(out.recipe, "model.tokenizer", tokenizer)
        out.keep(
            "model_name_or_path", tokenizer, "model.tokenizer", "TRL's scripts read the tokenizer from it"
        )
    elif tokenizer is not None:
        out.keep("model_name_or_path", tokenizer, "model.tokenizer", "the policy's own")


def import_data(flat: dict[str, Any], script: str | None, out: Migration) -> None:
    """The prompts: the dataset, its `prompt` column tokenized as plain text (no chat template), ppo.py's
    held-out last 100 rows and ppo_tldr.py's 512-token limit."""
    if not flat.get("dataset_name"):
        out.warn(
            "(no dataset)",
            None,
            "the source names no dataset (trl 0.9-0.11's scripts hard-coded theirs): set data.source",
            "data.source",
        )
    put(out.recipe, "data.prompt_column", "prompt")
    put(out.recipe, "data.chat_template", False)
    out.keep("(prompts)", "prompt", "data.prompt_column", "TRL's scripts tokenize the prompt column as text")
    out.keep(
        "(chat template)", False, "data.chat_template", "TRL's scripts (0.26 on) applied no chat template"
    )
    split = flat.get("dataset_train_split", "train")
    if script is not None and Path(script).stem == "ppo":
        put(out.recipe, "data.split", f"{split}[:-100]")
        out.keep(
            "dataset_train_split" if "dataset_train_split" in flat else "dataset_train_split (TRL default)",
            split,
            "data.split",
            f"{split}[:-100]: ppo.py trained on all but the split's last 100 rows (its sample tables' prompts)",
        )
    elif "dataset_train_split" in flat:
        put(out.recipe, "data.split", split)
        out.keep("dataset_train_split", split, "data.split")
    if script is not None and Path(script).stem == "ppo_tldr":
        put(out.recipe, "data.max_prompt_length", 512)
        out.keep(
            "(ppo_tldr.py)", 512, "data.max_prompt_length", "ppo_tldr.py dropped prompts over 512 tokens"
        )


def import_behaviour(flat: dict[str, Any], out: Migration) -> None:
    """What TRL's PPOTrainer did whatever the keys said: one optimizer step per PPO epoch, one learning
    rate for policy and critic, no clipping, a row every update, no gradient checkpointing."""
    asked = flat.get("num_mini_batches", 1)
    put(out.recipe, "ppo.num_mini_batches", 1)
    if asked != 1:
        out.warn(
            "num_mini_batches",
            asked,
            "TRL's loop (0.17-1.12) stepped the optimizer once per PPO epoch whatever num_mini_batches said; "
            "llm_rl steps once per mini-batch, so 1 reproduces the run. Raise it to get what the key meant",
            "ppo.num_mini_batches",
        )
    elif "num_mini_batches" in flat:
        out.keep("num_mini_batches", asked, "ppo.num_mini_batches")
    stop = flat.get("stop_token")
    put(out.recipe, "ppo.stop_token", stop)
    if "stop_token" in flat:
        out.keep("stop_token", stop, "ppo.stop_token")
    learning_rate = flat.get("learning_rate", TRL_PPO_DEFAULTS["learning_rate"])
    put(out.recipe, "ppo.critic_learning_rate", learning_rate)
    out.keep(
        "(critic learning rate)", learning_rate, "ppo.critic_learning_rate", "TRL: one optimizer, one rate"
    )
    put(out.recipe, "training.max_grad_norm", None)
    out.keep(
        "max_grad_norm" if "max_grad_norm" in flat else "(gradient clipping)",
        flat.get("max_grad_norm"),
        "training.max_grad_norm",
        "null: TRL's PPOTrainer never clipped gradients",
    )
    put(out.recipe, "training.logging_steps", 1)
    if "logging_steps" in flat:
        out.keep(
            "logging_steps", flat["logging_steps"], "training.logging_steps", "1: TRL logged every update"
        )
    put(out.recipe, "model.gradient_checkpointing", False)
    if "gradient_checkpointing" in flat:
        out.keep(
            "gradient_checkpointing",
            flat["gradient_checkpointing"],
            "model.gradient_checkpointing",
            "false: TRL's PPO never turned it on, whatever the key said",
        )


def import_trl_defaults(flat: dict[str, Any], out: Migration) -> None:
    """TRL 1.12's default for each setting the run left out, written into the recipe with a row."""
    for key, default in TRL_PPO_DEFAULTS.items():
        if key not in flat:
            target = SHARED_KEYS.get(key, f"ppo.{key}")
            put(out.recipe, target, default)
            out.keep(f"{key} (TRL default)", default, target)
    if "stop_token" not in flat:
        out.keep(
            "stop_token (TRL default)", None, "ppo.stop_token", "no stop: completions run to response_length"
        )
    if not {"bf16", "fp16"} & set(flat):
        out.keep(
            "bf16 (TRL default)",
            True,
            "training.precision",
            "auto: bf16 where the GPU has it, as TRL's PPOConfig (0.19 on) and its accelerate configs ran",
        )
    if not {"dtype", "torch_dtype"} & set(flat):
        put(out.recipe, "model.dtype", "float32")
        out.keep(
            "dtype (TRL default)", "float32", "model.dtype", "TRL's ModelConfig loaded float32 (0.27 on)"
        )
    if "total_episodes" not in flat:
        out.warn(
            "total_episodes (TRL default)",
            None,
            "TRL trained num_train_epochs x the train set's rows; set training.total_samples "
            "(llm_rl stops at 10,000 samples without it)",
            "training.total_samples",
        )


def unknown_flag_note(key: str) -> str:
    """Why a flag that is not TRL's is not carried, and where a data or template flag's meaning goes."""
    note = "not a flag of TRL's PPO scripts (your script's own?): llm_rl cannot know what it did; not carried"
    if any(part in key for part in DATA_LIKE_FLAGS):
        note += (
            ". It names data or prompt formatting: the recipe's data: section holds that (data.source, "
            "data.prompt_column, data.chat_template, data.system_prompt)"
        )
    return note
