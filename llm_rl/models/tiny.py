"""The embedded default policy `builtin:tiny-arithmetic`: a tiny Llama built and warmed up locally.

A character-level tokenizer over the arithmetic task's text and a ~660K-parameter Llama, supervised
briefly on the task (`llm_rl.data.tasks`) so that RL starts from a policy that is sometimes right. The
result is a normal `save_pretrained` folder (model, tokenizer, generation config), cached under
`$LLM_RL_CACHE` (default `~/.cache/llm_rl`) in a folder named by a hash of the build settings, and
written atomically: built in a temporary folder, then renamed into place.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from llm_rl.data.tasks import format_answer, format_prompt
from llm_rl.run_folder import apply_umask

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
# Special tokens first (ids 0..3), then every character the task's text uses.
VOCABULARY = [PAD, BOS, EOS, UNK, *"0123456789", "+", "=", " "]


@dataclass(frozen=True)
class TinyModelSettings:
    """Everything the built model depends on; its hash names the cache folder."""

    # Bump when the build code changes in a way that changes the model.
    version: int = 1
    layers: int = 4
    hidden: int = 128
    heads: int = 4
    intermediate: int = 256
    max_positions: int = 512
    # The warm-up task: sums of operands min_operand..max_operand.
    min_operand: int = 0
    max_operand: int = 9
    # Supervised warm-up on the answer tokens, sized so RL has room to improve. Measured over seeds 0..3:
    # ~35% greedy and ~19% sampled (temperature 1.0) accuracy; lr 3e-3 (DESIGN.md) was seed-sensitive.
    warmup_steps: int = 40
    learning_rate: float = 1e-3
    batch_size: int = 64
    seed: int = 0

    def key(self) -> str:
        """A stable hash of the settings (not Python's per-process `hash`)."""
        text = json.dumps(dataclasses.asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_root() -> Path:
    """Where built models are kept: `$LLM_RL_CACHE`, default `~/.cache/llm_rl`."""
    return Path(os.environ.get("LLM_RL_CACHE") or Path.home() / ".cache" / "llm_rl")


def tiny_model_path(settings: TinyModelSettings | None = None) -> Path:
    """The cached model folder for these settings, built first if missing."""
    settings = settings or TinyModelSettings()
    target = cache_root() / f"tiny-arithmetic-{settings.key()}"
    if not (target / "config.json").is_file():
        build_atomically(target, lambda folder: build_model(settings, folder))
    return target


def build_atomically(target: Path, build: Callable[[Path], None]) -> None:
    """Build a model folder in a temporary folder next to `target`, then rename it into place.

    Atomic on one filesystem: processes that build the same folder at once all end with a complete one.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        build(partial)
        apply_umask(partial)
        try:
            partial.rename(target)
        except OSError:
            # Another process finished first: its folder is complete and equal to ours. Otherwise the
            # folder is stale (incomplete: config.json deleted, say) and would block every build: replace it.
            if not (target / "config.json").is_file():
                stale = Path(tempfile.mkdtemp(prefix=f".{target.name}.stale.", dir=target.parent))
                try:
                    target.rename(stale / "old")
                finally:
                    shutil.rmtree(stale, ignore_errors=True)
                partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The character-level tokenizer: one token per character, `<bos>` prepended, pad distinct from EOS."""
    tokenizer = Tokenizer(models.WordLevel({token: i for i, token in enumerate(VOCABULARY)}, unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, VOCABULARY.index(BOS))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        model_max_length=TinyModelSettings.max_positions,
        padding_side="left",
    )


def build_model(settings: TinyModelSettings, folder: Path) -> None:
    """Initialise, warm up and save the model and tokenizer into `folder`, leaving global RNGs untouched."""
    tokenizer = build_tokenizer()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        model = LlamaForCausalLM(model_config(settings, tokenizer))
        warm_up(model, tokenizer, settings)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def model_config(settings: TinyModelSettings, tokenizer: PreTrainedTokenizerFast) -> LlamaConfig:
    """The Llama architecture of the tiny model."""
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=settings.hidden,
        intermediate_size=settings.intermediate,
        num_hidden_layers=settings.layers,
        num_attention_heads=settings.heads,
        num_key_value_heads=settings.heads,
        max_position_embeddings=settings.max_positions,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )


def task_examples(
    tokenizer: PreTrainedTokenizerFast, settings: TinyModelSettings
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every sum of the range as (input ids, labels): prompt + answer + EOS, loss on answer and EOS only.

    The prompt is tokenized as TRL's GRPOTrainer tokenizes plain-text prompts (default special tokens).
    """
    rows, labels = [], []
    operands = range(settings.min_operand, settings.max_operand + 1)
    for a in operands:
        for b in operands:
            prompt = tokenizer(format_prompt(a, b))["input_ids"]
            answer = tokenizer(format_answer(a, b), add_special_tokens=False)["input_ids"]
            answer.append(tokenizer.eos_token_id)
            rows.append(prompt + answer)
            labels.append([-100] * len(prompt) + answer)
    width = max(len(row) for row in rows)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([row + [pad] * (width - len(row)) for row in rows])
    targets = torch.tensor([label + [-100] * (width - len(label)) for label in labels])
    return ids, targets


def warm_up(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, settings: TinyModelSettings) -> None:
    """A short supervised run on random sums (right-padded, pad positions masked out of the loss)."""
    ids, labels = task_examples(tokenizer, settings)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate)
    model.train()
    for _ in range(settings.warmup_steps):
        batch = torch.randint(len(ids), (settings.batch_size,))
        loss = model(input_ids=ids[batch], labels=labels[batch]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
