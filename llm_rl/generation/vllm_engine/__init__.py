"""vLLM as the rollout engine: an engine inside every training process, colocated with training, its
weights made equal to the policy's after every update.

Generation itself is TRL's (`trl.generation.vllm_generation.VLLMGeneration`: its sampling, and its walk
over the policy's parameters, one at a time under DeepSpeed ZeRO-3 and merged under LoRA). The engine is
started here, for three reasons:

- **precision**: vLLM turns a float32 model into bfloat16; this engine runs in the training precision
  (`generation.vllm.dtype`), so that on a CPU it samples exactly the policy being trained;
- **start-up**: eager on CPU, where compiling costs about 30 s a process and gains little, and a KV cache
  of the size the recipe gives;
- **weight sync that works on every platform** (`push_weights`): TRL hands each parameter to the
  engine's `load_weights`, which needs the engine's layers to hold checkpoint-format tensors. vLLM's CPU
  build repacks each linear layer's weight for its kernels after loading and leaves an empty `weight`
  behind; there the weights go through vLLM's in-place reload (`reload_weights`), which restores the
  layers, loads them and repacks them. Which one runs is read from the engine's layers when it starts.

GRPO and RLOO use `ColocatedVLLM` through TRL's trainers (`llm_rl.algorithms.trl_groups`); PPO through
`VLLMGenerator`, on the `Generator` interface.

The parts: `engine` starts the engine (one a process), `colocated` is TRL's generation on it with the
weight sync, `sampling_params` turns `SamplingSettings` into vLLM's sampling fields, and `generators`
holds the `Generator`s on vLLM engines.
"""
