"""The data sections: where prompts come from (one dataset, a mixture, or the built-in arithmetic task)
and which of them are held out."""

from __future__ import annotations

from string import Formatter

from pydantic import Field, field_validator, model_validator

from llm_rl.schema.section import RuleBroken, Section


class ArithmeticTaskSection(Section):
    """Settings of the built-in arithmetic task (`data.source: builtin:arithmetic`)."""

    # The prompt's text, with `{a}` and `{b}` for the operands: the default suits the embedded model,
    # whose tokenizer knows only digits and signs; a chat model wants words, e.g.
    # "What is {a} + {b}? Reply with the number only."
    template: str = "{a}+{b}="

    # Operands are drawn uniformly from min_operand..max_operand (inclusive; min_operand <= max_operand).
    # Single digits by default: two-digit sums do not learn on a CPU (DESIGN.md).
    min_operand: int = Field(0, ge=0, le=99)
    # The largest operand; the embedded tiny model is warmed up on 0..9.
    max_operand: int = Field(9, ge=1, le=99)
    # Rows of the train split (drawn with replacement, seeded by run.seed).
    num_train: int = Field(2000, gt=0)
    # Rows of the eval split, drawn with another seed; 0: no eval split.
    num_eval: int = Field(200, ge=0)

    @field_validator("template")
    @classmethod
    def names_both_operands(cls, template: str) -> str:
        """Only `{a}` and `{b}`, each at least once: no attribute access or format spec reaches str.format."""
        fields = [
            (name, spec, conversion)
            for _, name, spec, conversion in Formatter().parse(template)
            if name is not None
        ]
        bad = [name for name, spec, conversion in fields if name not in ("a", "b") or spec or conversion]
        if bad:
            raise ValueError(
                f"only {{a}} and {{b}} may be in braces, not {{{bad[0]}}} (write {{{{ for a brace)"
            )
        missing = {"a", "b"} - {name for name, _, _ in fields}
        if missing:
            raise ValueError(f"the template has no {{{min(missing)}}}: it must show both operands")
        return template


class DataSourceEntry(Section):
    """One dataset of a mixture (`data.sources`), as TRL's `datasets:` list names one."""

    # Read as `data.source` is: a local file or folder, a hub id, or "builtin:<task>".
    source: str
    split: str = "train"
    # A hub dataset's configuration (the `name` of `datasets.load_dataset`).
    config: str | None = None
    # Columns kept from this dataset before the mixture is joined; None keeps all.
    columns: list[str] | None = None
    # This dataset's share of the mixture (TRL's `fraction`), normalised over the sources and capped so
    # that no dataset is repeated; set it on every source or on none. None: every row of every source.
    weight: float | None = Field(None, gt=0)


class DataSection(Section):
    # A local jsonl/json/parquet/csv file, a save_to_disk folder, a hub id, or "builtin:<task>".
    source: str = "builtin:arithmetic"
    # A split name, or part of one in `datasets`' slicing syntax ("train[:-100]", "train[:10%]").
    split: str = "train"
    # A hub dataset's configuration (the `name` of `datasets.load_dataset`).
    config: str | None = None
    # Several datasets joined into one train set, instead of source/split/config (TRL's `datasets:`).
    sources: list[DataSourceEntry] | None = None
    # A split of the same source for held-out prompts: none by default for files and folders, the task's
    # own "eval" split by default for builtin tasks.
    eval_split: str | None = None
    # Held-out prompts taken from the train set instead (seeded by run.seed): a fraction below 1 or a
    # number of rows (TRL's `test_split_size`).
    eval_size: float | int | None = Field(None, gt=0)
    prompt_column: str = "prompt"
    # Extra columns passed to the reward functions as keyword arguments; None: all of them.
    columns: list[str] | None = None
    # Renames applied before anything else, {old: new}.
    rename_columns: dict[str, str] = Field(default_factory=dict)
    system_prompt: str | None = None
    # Apply the tokenizer's chat template (when it has one) to plain-text prompts too.
    chat_template: bool = True
    # Prompts longer than this (in tokens) are dropped and counted, never truncated.
    max_prompt_length: int | None = Field(None, gt=0)
    # Keep at most this many rows (after shuffling with the run seed); None keeps all.
    limit: int | None = Field(None, gt=0)
    arithmetic: ArithmeticTaskSection = Field(default_factory=ArithmeticTaskSection)

    @property
    def names(self) -> list[str]:
        """The sources read: `source`, or each of `sources`."""
        return [entry.source for entry in self.sources] if self.sources else [self.source]

    @property
    def label(self) -> str:
        """The data as errors and logs name it: the source, or the mixture's sources joined by '+'."""
        return " + ".join(self.names)

    @model_validator(mode="after")
    def _train_data_named_one_way(self) -> DataSection:
        """One dataset (`source`, `split`, `config`) or a mixture (`sources`), with weights on all or none."""
        if self.sources is None:
            return self
        if not self.sources:
            raise RuleBroken("data.sources: give at least one dataset, or use data.source")
        both = sorted({"source", "split", "config"} & self.model_fields_set)
        if both:
            raise RuleBroken(
                f"data.sources and data.{both[0]} both set: a mixture names each dataset's source, split "
                "and config in its own entry"
            )
        weighted = [entry.weight is not None for entry in self.sources]
        if any(weighted) and not all(weighted):
            raise RuleBroken(
                f"data.sources[{weighted.index(False)}].weight: set a weight on every source or on none"
            )
        return self

    @model_validator(mode="after")
    def _held_out_named_one_way(self) -> DataSection:
        """Held-out prompts from a split of the one source, or a share of the train set."""
        if self.sources is not None and self.eval_split is not None:
            raise RuleBroken(
                "data.eval_split names a split of data.source; for a mixture hold prompts out with "
                "data.eval_size"
            )
        if self.eval_split is not None and self.eval_size is not None:
            raise RuleBroken(
                "data.eval_split and data.eval_size both set: take held-out prompts from a split or from "
                "the train set, not both"
            )
        if isinstance(self.eval_size, float) and self.eval_size >= 1:
            raise RuleBroken(
                f"data.eval_size: {self.eval_size} is neither a fraction below 1 nor a whole number of rows"
            )
        return self
