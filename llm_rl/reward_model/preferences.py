"""Preference data for reward-model training: `prompt` (optional), `chosen`, `rejected`, `margin` (optional).

Sources are the prompt data's (a local jsonl/json/parquet/csv file, a folder of split files or a
`save_to_disk` folder, a hub id) or a built-in set made locally:

- `builtin:arithmetic-preferences`: for each of the 100 single-digit sums, `3+4=`, the right answer
  `7` is chosen over each wrong one in 0..18. Four wrong answers per sum are kept for the held-out
  split (400 pairs), the other 14 train (1,400 pairs): no held-out pair is seen in training.
- `builtin:gsm8k-preferences`: each GSM8K reference solution is chosen over the same solution with
  its final answer changed (in the `#### N` line and in the step that computes it). Read from
  `data.gsm8k_dir`: `train.jsonl` gives the train split, `test.jsonl` the held-out split.

Columns are renamed to TRL's names (`data.*_column`). Text and conversational rows are both accepted,
as TRL's RewardTrainer accepts them.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from pathlib import Path

from datasets import Dataset

from llm_rl.data.sources import read_splits
from llm_rl.data.tasks import format_answer, format_prompt
from llm_rl.errors import DataError, unknown_builtin
from llm_rl.schema import DataSection, Section

BUILTIN_PREFIX = "builtin:"
# Of each sum's 18 wrong answers (0..18), this many pair with it in the held-out split only.
HELD_OUT_WRONG = 4
GSM8K_ANSWER = re.compile(r"####\s*(-?[\d,]*\.?\d+)\s*$")


class PreferenceDataSection(Section):
    # A local file or folder, a hub id, or builtin:arithmetic-preferences | builtin:gsm8k-preferences.
    source: str = "builtin:arithmetic-preferences"
    split: str = "train"
    # A split of the same source for the held-out accuracy; None: hold out eval_fraction of the rows.
    eval_split: str | None = None
    eval_fraction: float = 0.1
    prompt_column: str | None = "prompt"
    chosen_column: str = "chosen"
    rejected_column: str = "rejected"
    # A column of margins (how much better chosen is); None: no margin in the loss.
    margin_column: str | None = None
    # Keep at most this many training rows (after shuffling with the seed).
    limit: int | None = None
    # The GSM8K folder (train.jsonl, test.jsonl) that builtin:gsm8k-preferences reads.
    gsm8k_dir: str = "../shared/data/gsm8k"


def arithmetic_preferences(data: PreferenceDataSection, seed: int) -> dict[str, Dataset]:
    """Right sums chosen over wrong ones; each sum's wrong answers are split, so held-out pairs are unseen."""
    rng = random.Random(seed)
    rows = {split: {"prompt": [], "chosen": [], "rejected": []} for split in ("train", "eval")}
    for a in range(10):
        for b in range(10):
            wrong = [n for n in range(19) if n != a + b]
            rng.shuffle(wrong)
            for split, answers in (("eval", wrong[:HELD_OUT_WRONG]), ("train", wrong[HELD_OUT_WRONG:])):
                for answer in answers:
                    rows[split]["prompt"].append(format_prompt(a, b))
                    rows[split]["chosen"].append(format_answer(a, b))
                    rows[split]["rejected"].append(str(answer))
    return {split: Dataset.from_dict(columns) for split, columns in rows.items()}


def corrupt_solution(solution: str, rng: random.Random) -> str | None:
    """The solution with its final answer changed throughout its last line of work; None if it has none."""
    match = GSM8K_ANSWER.search(solution)
    if match is None:
        return None
    answer = match.group(1).replace(",", "")
    value = float(answer)
    wrong = value + rng.choice([-1, 1]) * rng.randint(1, max(2, int(abs(value) * 0.5) or 2))
    wrong_text = str(int(wrong)) if wrong == int(wrong) else f"{wrong:g}"
    body = solution[: match.start()]
    # The step that computes the answer usually ends with it (e.g. `<<9*2=18>>18`): change it there too.
    last = body.rstrip().rfind(answer)
    if last != -1:
        body = body[:last] + wrong_text + body[last + len(answer) :]
    return f"{body}#### {wrong_text}"


def gsm8k_preferences(data: PreferenceDataSection, seed: int) -> dict[str, Dataset]:
    """GSM8K reference solutions chosen over the same solutions with a wrong final answer."""
    folder = Path(data.gsm8k_dir).expanduser()
    rng = random.Random(seed)
    splits = {}
    for split, name in (("train", "train.jsonl"), ("eval", "test.jsonl")):
        path = folder / name
        if not path.is_file():
            raise DataError(f"no {name} in the GSM8K folder", where=f"data.gsm8k_dir: {folder}")
        rows = {"prompt": [], "chosen": [], "rejected": []}
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            rejected = corrupt_solution(row["answer"], rng)
            if rejected is not None:
                rows["prompt"].append(row["question"] + "\n")
                rows["chosen"].append(row["answer"])
                rows["rejected"].append(rejected)
        splits[split] = Dataset.from_dict(rows)
    return splits


BUILTIN_PREFERENCES: dict[str, Callable[[PreferenceDataSection, int], dict[str, Dataset]]] = {
    "arithmetic-preferences": arithmetic_preferences,
    "gsm8k-preferences": gsm8k_preferences,
}


def read_preference_splits(data: PreferenceDataSection, seed: int) -> dict[str, Dataset]:
    """The splits of the source, by name."""
    if data.source.startswith(BUILTIN_PREFIX):
        name = data.source[len(BUILTIN_PREFIX) :]
        builder = BUILTIN_PREFERENCES.get(name)
        if builder is None:
            raise DataError(unknown_builtin("preference set", name, BUILTIN_PREFERENCES), where=data.source)
        return builder(data, seed)
    return read_splits(data.source, seed, DataSection())


def to_trl_columns(dataset: Dataset, data: PreferenceDataSection, split: str) -> Dataset:
    """Only the columns RewardTrainer reads, under its names; a missing column is named with its key."""
    wanted = {data.chosen_column: "chosen", data.rejected_column: "rejected"}
    if data.prompt_column is not None and data.prompt_column in dataset.column_names:
        wanted[data.prompt_column] = "prompt"
    if data.margin_column is not None:
        wanted[data.margin_column] = "margin"
    for column, key in ((data.chosen_column, "chosen_column"), (data.rejected_column, "rejected_column")):
        if column not in dataset.column_names:
            found = ", ".join(dataset.column_names)
            raise DataError(
                f"no column {column!r} (data.{key}); the split has: {found}", where=f"{data.source} [{split}]"
            )
    if data.margin_column is not None and data.margin_column not in dataset.column_names:
        raise DataError(
            f"no column {data.margin_column!r} (data.margin_column)", where=f"{data.source} [{split}]"
        )
    dataset = dataset.select_columns(list(wanted)).rename_columns({k: v for k, v in wanted.items() if k != v})
    check_rows(dataset, data.source, split)
    return dataset


def check_rows(dataset: Dataset, source: str, split: str) -> None:
    """Every chosen and rejected is non-empty text or a message list; the first bad row is named."""
    for index, row in enumerate(dataset):
        for key in ("chosen", "rejected"):
            value = row[key]
            if not (isinstance(value, str) and value.strip()) and not (isinstance(value, list) and value):
                raise DataError(
                    f"row {index}: {key} is empty or not text/messages ({value!r})",
                    where=f"{source} [{split}]",
                )


def load_preferences(data: PreferenceDataSection, seed: int) -> tuple[Dataset, Dataset]:
    """(train, held-out) preference pairs in TRL's columns."""
    splits = read_preference_splits(data, seed)
    if data.split not in splits:
        raise DataError(
            f"no split {data.split!r} (data.split); it has: {', '.join(splits)}", where=data.source
        )
    train = to_trl_columns(splits[data.split], data, data.split)
    eval_name = data.eval_split or ("eval" if data.source.startswith(BUILTIN_PREFIX) else None)
    if eval_name is not None:
        if eval_name not in splits:
            raise DataError(
                f"no split {eval_name!r} (data.eval_split); it has: {', '.join(splits)}", where=data.source
            )
        held_out = to_trl_columns(splits[eval_name], data, eval_name)
    else:
        parts = train.train_test_split(test_size=data.eval_fraction, seed=seed)
        train, held_out = parts["train"], parts["test"]
    if data.limit is not None:
        train = train.shuffle(seed=seed).select(range(min(data.limit, len(train))))
    if len(held_out) == 0:
        raise DataError(
            "the held-out split has no rows: set data.eval_split or a larger data.eval_fraction",
            where=data.source,
        )
    return train, held_out
