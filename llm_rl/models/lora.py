"""LoRA through peft, from the recipe's `model.lora` section."""

from __future__ import annotations

from peft import LoraConfig

from llm_rl.schema import LoraSection


def peft_config(lora: LoraSection) -> LoraConfig | None:
    """The peft `LoraConfig` for a causal LM, or None when LoRA is off."""
    if not lora.enabled:
        return None
    return LoraConfig(
        task_type="CAUSAL_LM",
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
    )
