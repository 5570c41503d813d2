"""TRL's group trainers (GRPO, RLOO): trainers that sample a group of completions per prompt and take
llm_rl's reward functions as they are, each declared once (`declaration.GroupTrainer`).

`config` maps a recipe to the TRL config, `checks` holds the recipe checks, `trainer` builds the TRL
trainer with llm_rl's metrics, `group_spread` measures the groups' reward spread, and `migration`
answers `doctor` and `migrate`.

Log-probs without full-vocabulary logits need no switch here: TRL 1.16's GRPO and RLOO trainers always
patch the policy's (and the reference's) forward with a fused LM head (`trl.trainer.utils.add_fused_lm_head`):
`_get_per_token_logps_and_entropies` calls it with `fused_lm_head=True`, and it projects the final
hidden states of the completion positions through the head in tiles, with a custom backward
(`_ChunkedLogProbFunction`), so no batch x length x vocabulary tensor is made. Its one option,
`grpo.cast_lm_head_to_fp32` (GRPO only; RLOOConfig has no such field), passes through like any other
key. (Liger's fused linear cross-entropy is refused by TRL for the same reason.) llm_rl's PPO does the
same in `llm_rl.algorithms.ppo.forward`.
"""
