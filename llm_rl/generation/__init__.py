"""The generation layer: how every part of llm_rl that generates (training rollouts, held-out evaluation,
`llm-rl sample` and `llm-rl serve`) turns prompts into completions.

- `backends`: what `generation.backend` means on this host, and the backends it cannot run;
- `sampling`: what is sampled (`SamplingSettings`), the `Generator` interface, and the padding of
  prompts and completions;
- `transformers_generators`: transformers' `generate` (`hf`, `static`) and continuous batching (`paged`);
- `vllm_engine`: a vLLM engine colocated with training, its weights kept equal to the policy's (`vllm`):
  starting it (`engine`), TRL's generation and weight sync on it (`colocated`), the vLLM generators;
- `generators`: the generator a backend names.
"""
