"""TRL runs imported as llm_rl recipes for `llm-rl migrate`, each source key accounted for (a row in
`recipe.accounting.Migration`).

- `grpo`: a flat TRL-style GRPO file (GRPOConfig fields and script arguments at the top level);
- `ppo`: a run of TRL's deleted PPOTrainer scripts, as a PPO recipe that does what they did;
- `ppo_keys`: TRL's PPO keys by what becomes of them, TRL 1.12's defaults, and how a PPO run is told apart;
- `data`: the dataset or mixture of datasets a GRPO file trains on;
- `vllm`: `use_vllm` and the vLLM settings, older releases' included;
- `rewards`: reward functions, the reward model and their weights;
- `shared_args`: the arguments both kinds of run share (precision, dtype, reporting, switches llm_rl lacks);
- `cadence`: when the run saved checkpoints and evaluated, and what it resumed from.
"""
