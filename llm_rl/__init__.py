"""llm_rl: reinforcement-learning fine-tuning of LLMs (GRPO, PPO, RLOO) from YAML recipes."""

import warnings

# TRL checks vLLM's version at five import sites and warns at each one when it is outside the range TRL
# tested (vLLM's CPU build is 0.32): the warning stays, once.
warnings.filterwarnings("once", message="TRL currently supports vLLM versions")
