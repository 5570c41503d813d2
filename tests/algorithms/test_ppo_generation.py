"""PPO's rollout pieces on the embedded model: generation behind its interface, and forward passes that
never run the LM head on prompt positions."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from accelerate import Accelerator
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from llm_rl.algorithms.ppo.forward import PolicyAndCritic, chunked_logprobs, chunked_values, model_inputs
from llm_rl.algorithms.ppo.rollout import join_sequences
from llm_rl.generation.generators import build_generator
from llm_rl.generation.sampling import SamplingSettings
from llm_rl.generation.transformers_generators import HFGenerator, PagedGenerator
from llm_rl.models.completions import response_lengths
from llm_rl.models.tiny import build_tokenizer, tiny_model_path


@pytest.fixture(scope="module")
def policy() -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(tiny_model_path()).eval()


@pytest.fixture(scope="module")
def prompts() -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompts of different lengths, as the prompt loader batches them."""
    tokenizer = build_tokenizer()
    batch = tokenizer.pad({"input_ids": [tokenizer(p)["input_ids"] for p in ["3+4=", "12+9=", "7+1="] * 2]})
    return torch.tensor(batch["input_ids"]), torch.tensor(batch["attention_mask"]).bool()


def generate(policy, prompts, chunk_size: int = 4, seed: int = 0, **settings) -> torch.Tensor:
    """Completions from the generator `settings["backend"]` names (default hf)."""
    tokenizer = build_tokenizer()
    sampling = SamplingSettings(
        **{"max_new_tokens": 6, "temperature": 1.0, "pad_token_id": tokenizer.pad_token_id, **settings}
    )
    wrapper = PolicyAndCritic(
        policy, AutoModelForSequenceClassification.from_pretrained(tiny_model_path(), num_labels=1)
    )
    generator = build_generator(lambda: wrapper, Accelerator(cpu=True), sampling, chunk_size=chunk_size)
    torch.manual_seed(seed)
    return generator.generate(*prompts).completion_ids


def test_completions_stop_at_the_stop_token_and_are_padded_after_it(policy, prompts) -> None:
    eos, pad = build_tokenizer().eos_token_id, build_tokenizer().pad_token_id
    completions = generate(policy, prompts, stop_token_ids=[eos])
    assert completions.shape[0] == 6 and completions.shape[1] <= 6
    lengths = response_lengths(completions, [eos])
    for row, length in zip(completions.tolist(), lengths.tolist(), strict=True):
        assert all(token == pad for token in row[length + 1 :]), "nothing but padding after the stop"
    assert (completions == eos).any(), "the warmed-up model ends some sums"


def test_without_a_stop_token_completions_run_to_the_length_limit(policy, prompts) -> None:
    """`ppo.stop_token: null`: the model's own EOS does not end a completion either."""
    completions = generate(policy, prompts, stop_token_ids=[], max_new_tokens=5)
    assert completions.shape == (6, 5)


def test_min_new_tokens_holds_the_stop_token_back(policy, prompts) -> None:
    eos = build_tokenizer().eos_token_id
    completions = generate(policy, prompts, stop_token_ids=[eos], min_new_tokens=4)
    assert (response_lengths(completions, [eos]) >= 3).all()


def test_logprobs_and_values_run_the_heads_on_response_positions_only(policy, prompts) -> None:
    """The LM head sees `width + 1` positions a call, `chunk_size` rows at most: never the prompt's."""
    eos, pad = build_tokenizer().eos_token_id, build_tokenizer().pad_token_id
    completions = generate(policy, prompts, stop_token_ids=[eos], min_new_tokens=3)
    lengths = response_lengths(completions, [eos])
    ids, attention = join_sequences(*prompts, completions, lengths)
    width = completions.shape[1]
    shapes: list[torch.Size] = []
    hook = policy.lm_head.register_forward_hook(lambda module, args, output: shapes.append(output.shape))
    try:
        logprobs = chunked_logprobs(
            policy, ids, attention, width, temperature=1.0, pad_token_id=pad, chunk_size=4
        )
    finally:
        hook.remove()
    assert [shape[:2] for shape in shapes] == [(4, width + 1), (2, width + 1)]
    # The same log-probs as a full forward over every position, read at the response.
    full = policy(**model_inputs(ids, attention, pad)).logits[:, -width - 1 : -1].log_softmax(-1)
    expected = full.gather(-1, completions[..., None]).squeeze(-1)
    assert torch.allclose(logprobs, expected, atol=1e-5)
    critic = AutoModelForSequenceClassification.from_pretrained(tiny_model_path(), num_labels=1)
    values = chunked_values(critic, ids, attention, width, pad_token_id=pad, chunk_size=4)
    assert values.shape == (6, width)


def test_the_model_generation_config_does_not_reshape_sampling(policy, prompts) -> None:
    """A checkpoint's repetition penalty or n-gram ban would make sampling differ from the softmax the
    log-probs assume: rollouts sample with the recipe's settings alone, and the model keeps its own."""
    eos = build_tokenizer().eos_token_id
    plain = generate(policy, prompts, stop_token_ids=[eos], min_new_tokens=5)
    saved = policy.generation_config
    policy.generation_config = saved.__class__(
        **{**saved.to_dict(), "no_repeat_ngram_size": 1, "repetition_penalty": 50.0}
    )
    try:
        with_model_settings = generate(policy, prompts, stop_token_ids=[eos], min_new_tokens=5)
        assert policy.generation_config.no_repeat_ngram_size == 1, "the model's own config is restored"
    finally:
        policy.generation_config = saved
    assert torch.equal(plain, with_model_settings)


# --- generation backends: how completions are generated, never what ---


def test_each_backend_has_its_generator() -> None:
    sampling = SamplingSettings(max_new_tokens=2, temperature=1.0)
    for backend, generator_class in (("hf", HFGenerator), ("static", HFGenerator), ("paged", PagedGenerator)):
        sampling.backend = backend
        generator = build_generator(lambda: None, Accelerator(cpu=True), sampling, chunk_size=4)
        assert type(generator) is generator_class
    sampling.backend = "static"
    assert sampling.generation_config().cache_implementation == "static"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["static", "paged"])
def test_greedy_completions_are_the_same_with_every_backend(policy, prompts, backend: str) -> None:
    """top_k 1 samples the argmax: each backend gives the very tokens `hf` gives, stop and padding included."""
    eos = build_tokenizer().eos_token_id
    greedy = {"top_k": 1, "stop_token_ids": [eos], "max_new_tokens": 8}
    plain = generate(policy, prompts, **greedy)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert torch.equal(generate(policy, prompts, backend=backend, **greedy), plain)
    compiled = torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs
    assert (compiled > 0) == (backend == "static"), "static compiles its forward, and only static"
    # No stop token: every completion runs to the length limit on each backend alike.
    endless = {**greedy, "stop_token_ids": []}
    assert torch.equal(
        generate(policy, prompts, backend=backend, **endless), generate(policy, prompts, **endless)
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["static", "paged"])
def test_sampled_completions_match_in_length_and_ending_with_every_backend(policy, backend: str) -> None:
    """At temperature 1 over 192 prompts, mean length and the share that end agree within noise."""
    tokenizer = build_tokenizer()
    eos = tokenizer.eos_token_id
    texts = [f"{a}+{b}=" for a in range(8) for b in range(8)] * 3
    batch = tokenizer.pad({"input_ids": [tokenizer(text)["input_ids"] for text in texts]})
    many = torch.tensor(batch["input_ids"]), torch.tensor(batch["attention_mask"]).bool()
    statistics = {}
    for name in ("hf", backend):
        completions = generate(policy, many, chunk_size=64, seed=1, backend=name, stop_token_ids=[eos])
        lengths = response_lengths(completions, [eos]).float() + 1
        statistics[name] = (lengths.mean().item(), (completions == eos).any(1).float().mean().item())
    assert abs(statistics["hf"][0] - statistics[backend][0]) < 0.3, statistics
    assert abs(statistics["hf"][1] - statistics[backend][1]) < 0.15, statistics
