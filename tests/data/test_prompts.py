"""The prompt data loader: every kind of source, column mapping, prompt formatting, length filter, tokens.

Real `datasets` loading of files written in tmp_path, the real GSM8K test split, and the tiny model's
character-level tokenizer (one token per character, `<bos>` first), so token counts are easy to state.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset, DatasetDict

from llm_rl.data.prompts import prompt_token_ids, tokenize_prompts
from llm_rl.models.tiny import build_tokenizer
from tests.data.conftest import SUM, data_error, load, rows_of, small_arithmetic

ROWS = [
    {"prompt": "1+2=", "answer": "#### 3", "level": "easy"},
    {"prompt": "4+4=", "answer": "#### 8", "level": "easy"},
    {"prompt": "9+9=", "answer": "#### 18", "level": "hard"},
]
# Joins the messages' contents with a space, then "=" as the generation prompt: all in the tiny vocabulary.
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['content'] }}{% if not loop.last %} {% endif %}{% endfor %}"
    "{% if add_generation_prompt %}={% endif %}"
)


@pytest.fixture(scope="module")
def chat_tokenizer():
    chat = build_tokenizer()
    chat.chat_template = CHAT_TEMPLATE
    return chat


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------------------------------
# Files and folders
# ----------------------------------------------------------------------------------------------------


def write_source(kind: str, folder: Path) -> Path:
    """ROWS as one file of the given kind."""
    if kind == "jsonl":
        return write_jsonl(folder / "data.jsonl", ROWS)
    if kind == "json":
        path = folder / "data.json"
        path.write_text(json.dumps(ROWS), encoding="utf-8")
        return path
    if kind == "parquet":
        path = folder / "data.parquet"
        Dataset.from_list(ROWS).to_parquet(str(path))
        return path
    path = folder / "data.csv"
    lines = ["prompt,answer,level", *(f"{r['prompt']},{r['answer']},{r['level']}" for r in ROWS)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["jsonl", "json", "parquet", "csv"])
def test_each_file_type_loads_as_the_train_split(tokenizer, tmp_path: Path, kind: str) -> None:
    path = write_source(kind, tmp_path)
    data = load(tokenizer, source=str(path))
    assert rows_of(data.train) == ROWS
    # Files have no eval split unless one is named.
    assert data.eval is None
    assert data.reward_columns == ["answer", "level"]


def test_save_to_disk_dataset_is_the_train_split(tokenizer, tmp_path: Path) -> None:
    Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "saved"))
    data = load(tokenizer, source=str(tmp_path / "saved"))
    assert rows_of(data.train) == ROWS
    assert data.eval is None


def test_save_to_disk_dataset_dict_gives_its_splits(tokenizer, tmp_path: Path) -> None:
    held_out = [{"prompt": "5+5=", "answer": "#### 10", "level": "easy"}]
    DatasetDict({"train": Dataset.from_list(ROWS), "validation": Dataset.from_list(held_out)}).save_to_disk(
        str(tmp_path / "saved")
    )
    data = load(tokenizer, source=str(tmp_path / "saved"), eval_split="validation")
    assert rows_of(data.train) == ROWS
    assert rows_of(data.eval) == held_out
    swapped = load(tokenizer, source=str(tmp_path / "saved"), split="validation")
    assert rows_of(swapped.train) == held_out


def test_folder_of_split_files(tokenizer, tmp_path: Path) -> None:
    test_rows = [{"prompt": "2+2=", "answer": "#### 4", "level": "easy"}]
    write_jsonl(tmp_path / "train.jsonl", ROWS)
    write_jsonl(tmp_path / "test.jsonl", test_rows)
    (tmp_path / "notes.txt").write_text("not data")
    data = load(tokenizer, source=str(tmp_path), split="train", eval_split="test")
    assert rows_of(data.train) == ROWS
    assert rows_of(data.eval) == test_rows
    # Without eval_split a folder gives no eval split, even when it has a test file.
    assert load(tokenizer, source=str(tmp_path)).eval is None


def test_unknown_split_names_the_existing_ones(tokenizer, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "train.jsonl", ROWS)
    write_jsonl(tmp_path / "test.jsonl", ROWS)
    message = data_error(tokenizer, source=str(tmp_path), eval_split="validation")
    assert message == f"{tmp_path}: data.eval_split: no split 'validation'; the source has: test, train"
    message = data_error(tokenizer, source=str(tmp_path / "train.jsonl"), split="dev")
    assert message.endswith("data.split: no split 'dev'; the source has: train")


def test_real_gsm8k_test_split(tokenizer, gsm8k_dir: Path) -> None:
    source = str(gsm8k_dir / "test.jsonl")
    data = load(tokenizer, source=source, prompt_column="question", columns=["answer"])
    assert len(data.train) == 1319
    assert data.train.column_names == ["prompt", "answer"]
    assert data.reward_columns == ["answer"]
    first = json.loads((gsm8k_dir / "test.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert data.train[0] == {"prompt": first["question"], "answer": first["answer"]}
    assert all("####" in answer for answer in data.train["answer"])


def test_gsm8k_length_filter_drops_and_counts_never_truncates(tokenizer, gsm8k_dir: Path) -> None:
    lines = (gsm8k_dir / "test.jsonl").read_text(encoding="utf-8").splitlines()
    questions = [json.loads(line)["question"] for line in lines]
    limit = 200
    # One token per character plus <bos>: counted here without the tokenizer.
    expected = [q for q in questions if len(q) + 1 <= limit]
    assert 0 < len(expected) < len(questions)
    data = load(
        tokenizer,
        source=str(gsm8k_dir / "test.jsonl"),
        prompt_column="question",
        columns=["answer"],
        max_prompt_length=limit,
    )
    assert data.train["prompt"] == expected
    assert data.dropped_too_long == len(questions) - len(expected)


def test_missing_file_or_folder(tokenizer, tmp_path: Path) -> None:
    for source in [str(tmp_path / "absent.jsonl"), str(tmp_path / "absent"), "./absent", "data/absent.csv"]:
        assert (
            data_error(tokenizer, source=source) == f"{source}: data.source: dataset file or folder not found"
        )


def test_unsupported_file_type(tokenizer, tmp_path: Path) -> None:
    path = tmp_path / "data.txt"
    path.write_text("1+1=\n")
    message = data_error(tokenizer, source=str(path))
    assert message.startswith(f"{path}: unsupported file type '.txt'")


def test_folder_without_data(tokenizer, tmp_path: Path) -> None:
    (tmp_path / "readme.md").write_text("nothing here")
    message = data_error(tokenizer, source=str(tmp_path))
    assert message.startswith(f"{tmp_path}: folder holds no save_to_disk dataset")


def test_hub_id_that_does_not_load_offline(tokenizer) -> None:
    # conftest sets HF_HUB_OFFLINE=1: a hub id not in the local cache fails at once, without the network.
    message = data_error(tokenizer, source="no-such-org/no-such-dataset")
    assert message.startswith(
        "no-such-org/no-such-dataset: data.source: not a local file or folder, and not loadable"
    )


def test_malformed_jsonl_line_is_named(tokenizer, tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "1+1="}\n\n{"prompt": "2+2="}\n{"prompt": "3+3="\n', encoding="utf-8")
    assert data_error(tokenizer, source=str(path)).startswith(f"{path}: line 4 is not valid JSON")
    path.write_text('{"prompt": "1+1="}\n[1, 2]\n', encoding="utf-8")
    assert data_error(tokenizer, source=str(path)) == f"{path}: line 2 is not a JSON object"


@pytest.mark.parametrize(
    ("name", "text"),
    [("empty.jsonl", ""), ("blank.jsonl", "\n\n"), ("header.csv", "prompt,answer\n"), ("empty.json", "[]")],
)
def test_empty_file_says_it_has_no_rows(tokenizer, tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert data_error(tokenizer, source=str(path)) == f"{path}: the dataset has no rows"


def test_empty_parquet_says_it_has_no_rows(tokenizer, tmp_path: Path) -> None:
    path = tmp_path / "empty.parquet"
    Dataset.from_dict({"prompt": [], "answer": []}).to_parquet(str(path))
    assert data_error(tokenizer, source=str(path)) == f"{path}: the dataset has no rows"


def test_empty_save_to_disk_dataset_is_a_data_error(tokenizer, tmp_path: Path) -> None:
    # `datasets` cannot load back an empty saved dataset (IndexError); that must still be a DataError.
    Dataset.from_dict({"prompt": [], "answer": []}).save_to_disk(str(tmp_path / "saved"))
    message = data_error(tokenizer, source=str(tmp_path / "saved"))
    assert message == f"{tmp_path / 'saved'}: the dataset has no rows (empty: train)"
    empty_split = DatasetDict({"train": Dataset.from_list(ROWS), "test": Dataset.from_dict({"prompt": []})})
    empty_split.save_to_disk(str(tmp_path / "dict"))
    message = data_error(tokenizer, source=str(tmp_path / "dict"))
    assert message == f"{tmp_path / 'dict'}: the dataset has no rows (empty: test)"


def test_corrupt_save_to_disk_folder_is_a_data_error(tokenizer, tmp_path: Path) -> None:
    Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "saved"))
    for arrow in (tmp_path / "saved").glob("*.arrow"):
        arrow.write_bytes(b"not arrow")
    message = data_error(tokenizer, source=str(tmp_path / "saved"))
    assert message.startswith(f"{tmp_path / 'saved'}: could not load the save_to_disk folder: ")


# ----------------------------------------------------------------------------------------------------
# Columns
# ----------------------------------------------------------------------------------------------------


def test_prompt_column_is_renamed_to_prompt(tokenizer, tmp_path: Path) -> None:
    rows = [{"question": r["prompt"], "answer": r["answer"]} for r in ROWS]
    data = load(tokenizer, source=str(write_jsonl(tmp_path / "q.jsonl", rows)), prompt_column="question")
    assert data.train.column_names == ["prompt", "answer"]
    assert data.train["prompt"] == [r["prompt"] for r in ROWS]
    assert data.reward_columns == ["answer"]


def test_prompt_column_replaces_an_existing_prompt_column(tokenizer, tmp_path: Path) -> None:
    rows = [{"prompt": "ignored", "question": r["prompt"]} for r in ROWS]
    data = load(tokenizer, source=str(write_jsonl(tmp_path / "q.jsonl", rows)), prompt_column="question")
    assert data.train.column_names == ["prompt"]
    assert data.train["prompt"] == [r["prompt"] for r in ROWS]


def test_rename_columns_apply_before_the_prompt_column(tokenizer, tmp_path: Path) -> None:
    rows = [{"q": r["prompt"], "gold": r["answer"]} for r in ROWS]
    data = load(
        tokenizer,
        source=str(write_jsonl(tmp_path / "q.jsonl", rows)),
        rename_columns={"q": "question", "gold": "answer"},
        prompt_column="question",
    )
    assert data.train.column_names == ["prompt", "answer"]
    assert data.train["answer"] == [r["answer"] for r in ROWS]


def test_columns_selects_what_reaches_the_rewards(tokenizer, tmp_path: Path) -> None:
    source = str(write_jsonl(tmp_path / "d.jsonl", ROWS))
    data = load(tokenizer, source=source, columns=["level"])
    assert data.train.column_names == ["prompt", "level"]
    assert data.reward_columns == ["level"]
    # Naming the prompt among them does not duplicate it.
    assert load(tokenizer, source=source, columns=["prompt", "answer"]).reward_columns == ["answer"]
    assert load(tokenizer, source=source, columns=[]).reward_columns == []


def test_missing_columns_name_the_existing_ones(tokenizer, tmp_path: Path) -> None:
    source = str(write_jsonl(tmp_path / "d.jsonl", ROWS))
    where = f"{source} [train]: "
    existing = "the dataset has: prompt, answer, level"
    assert data_error(tokenizer, source=source, prompt_column="question") == (
        f"{where}data.prompt_column: no column 'question'; {existing}"
    )
    assert data_error(tokenizer, source=source, rename_columns={"gold": "answer2"}) == (
        f"{where}data.rename_columns.gold: no column 'gold'; {existing}"
    )
    assert data_error(tokenizer, source=source, columns=["answer", "solution"]) == (
        f"{where}data.columns: no column 'solution'; {existing}"
    )


def test_errors_in_the_eval_split_name_it(tokenizer, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "train.jsonl", ROWS)
    write_jsonl(tmp_path / "test.jsonl", [{"prompt": "1+1="}])
    message = data_error(tokenizer, source=str(tmp_path), eval_split="test", columns=["answer"])
    assert message.startswith(f"{tmp_path} [test]: data.columns: no column 'answer'")


# ----------------------------------------------------------------------------------------------------
# Prompts
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ("", "prompt is empty"),
        ("   ", "prompt is empty"),
        (None, "prompt must be text or a list of chat messages, not NoneType"),
    ],
)
def test_a_bad_prompt_row_is_named(tokenizer, tmp_path: Path, bad: Any, problem: str) -> None:
    rows = [{"prompt": "1+1="}, {"prompt": "2+2="}, {"prompt": bad}, {"prompt": "3+3="}]
    source = str(write_jsonl(tmp_path / "d.jsonl", rows))
    message = data_error(tokenizer, source=source)
    assert message.startswith(f"{source} [train]: row 2: {problem}")


def test_a_list_prompt_that_is_not_messages_is_named(tokenizer, chat_tokenizer, tmp_path: Path) -> None:
    rows = [
        {"prompt": [{"role": "user", "content": "1+1="}]},
        {"prompt": [{"role": "user", "text": "2+2="}]},
    ]
    source = str(write_jsonl(tmp_path / "d.jsonl", rows))
    message = data_error(chat_tokenizer, source=source)
    assert message == f"{source} [train]: row 1: prompt is a list, but not of {{role, content}} messages"


def test_system_prompt_without_chat_template_is_prepended(tokenizer, tmp_path: Path) -> None:
    source = str(write_jsonl(tmp_path / "d.jsonl", ROWS))
    data = load(tokenizer, source=source, system_prompt="Add.")
    assert data.train["prompt"] == [f"Add.\n\n{r['prompt']}" for r in ROWS]
    assert data.train["answer"] == [r["answer"] for r in ROWS]
    # No system prompt and no chat template: the text is left as it is.
    assert load(tokenizer, source=source).train["prompt"] == [r["prompt"] for r in ROWS]


def test_chat_template_turns_prompts_into_messages_system_first(chat_tokenizer) -> None:
    data = load(chat_tokenizer, system_prompt="0+0=0", **small_arithmetic(num_train=5, num_eval=3))
    raw = load(build_tokenizer(), **small_arithmetic(num_train=5, num_eval=3))
    for formatted, text in [*zip(data.train, raw.train, strict=True), *zip(data.eval, raw.eval, strict=True)]:
        assert formatted["prompt"] == [
            {"role": "system", "content": "0+0=0"},
            {"role": "user", "content": text["prompt"]},
        ]
        assert formatted["answer"] == text["answer"]


def test_chat_template_without_system_prompt(chat_tokenizer) -> None:
    data = load(chat_tokenizer, **small_arithmetic(num_train=4, num_eval=0))
    assert all(
        prompt == [{"role": "user", "content": prompt[0]["content"]}] for prompt in data.train["prompt"]
    )


def test_chat_template_off_keeps_text(chat_tokenizer, tmp_path: Path) -> None:
    source = str(write_jsonl(tmp_path / "d.jsonl", ROWS))
    data = load(chat_tokenizer, source=source, chat_template=False, system_prompt="Add.")
    assert data.train["prompt"] == [f"Add.\n\n{r['prompt']}" for r in ROWS]


def test_conversational_prompts_keep_their_own_system_message(chat_tokenizer, tmp_path: Path) -> None:
    rows = [
        {"prompt": [{"role": "system", "content": "mine"}, {"role": "user", "content": "1+1="}]},
        {"prompt": [{"role": "user", "content": "2+2="}]},
    ]
    source = str(write_jsonl(tmp_path / "chat.jsonl", rows))
    prompts = load(chat_tokenizer, source=source, system_prompt="recipe").train["prompt"]
    assert prompts[0] == rows[0]["prompt"]
    assert prompts[1] == [{"role": "system", "content": "recipe"}, {"role": "user", "content": "2+2="}]


def test_conversational_prompts_need_a_chat_template(tokenizer, tmp_path: Path) -> None:
    source = str(write_jsonl(tmp_path / "chat.jsonl", [{"prompt": [{"role": "user", "content": "1+1="}]}]))
    message = data_error(tokenizer, source=source)
    assert message == f"{source} [train]: prompts are chat messages, but the tokenizer has no chat template"


# ----------------------------------------------------------------------------------------------------
# Length filter and limit
# ----------------------------------------------------------------------------------------------------


def test_max_prompt_length_drops_and_counts_in_both_splits(tokenizer) -> None:
    section = small_arithmetic(max_operand=12, num_train=200, num_eval=100)
    full = load(tokenizer, **section)
    # "a+b=" with <bos> is 5 tokens only when both operands have one digit.
    short = load(tokenizer, max_prompt_length=5, **section)
    kept_train = [p for p in full.train["prompt"] if len(p) + 1 <= 5]
    kept_eval = [p for p in full.eval["prompt"] if len(p) + 1 <= 5]
    assert short.train["prompt"] == kept_train
    assert short.eval["prompt"] == kept_eval
    dropped = len(full.train) - len(kept_train) + len(full.eval) - len(kept_eval)
    assert dropped > 0
    assert short.dropped_too_long == dropped
    assert all(SUM.match(p) for p in short.train["prompt"])
    # A limit no prompt reaches drops nothing.
    assert load(tokenizer, max_prompt_length=8, **section).dropped_too_long == 0


def test_max_prompt_length_counts_chat_template_tokens(chat_tokenizer, tmp_path: Path) -> None:
    rows = [{"prompt": "1+1"}, {"prompt": "11+11"}]
    source = str(write_jsonl(tmp_path / "d.jsonl", rows))
    # The template renders "1+1=" (4 tokens, no <bos>) and "11+11=" (6 tokens).
    data = load(chat_tokenizer, source=source, max_prompt_length=4)
    assert data.train["prompt"] == [[{"role": "user", "content": "1+1"}]]
    assert data.dropped_too_long == 1


def test_every_prompt_too_long_is_a_data_error(tokenizer, tmp_path: Path) -> None:
    source = str(write_jsonl(tmp_path / "d.jsonl", ROWS))
    message = data_error(tokenizer, source=source, max_prompt_length=2)
    assert message == f"{source} [train]: every prompt is longer than data.max_prompt_length (2 tokens)"


def test_an_eval_split_too_long_throughout_is_empty_not_an_error(tokenizer, tmp_path: Path) -> None:
    """Evaluation off, the held-out prompts do not block a run; evaluation on refuses it (see below)."""
    folder = tmp_path / "d"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", [{"prompt": "1+2="}])
    write_jsonl(folder / "test.jsonl", [{"prompt": "11+22+33="}])
    data = load(tokenizer, source=str(folder), eval_split="test", max_prompt_length=6)
    assert len(data.train) == 1 and len(data.eval) == 0
    assert data.dropped_too_long == 1


def test_evaluation_on_an_eval_split_too_long_throughout_is_named(tokenizer, tmp_path: Path) -> None:
    from types import SimpleNamespace

    from llm_rl.errors import DataError
    from llm_rl.recipe.load import load_recipe
    from llm_rl.training.evaluation import held_out_reward

    folder = tmp_path / "d"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", [{"prompt": "1+2="}])
    write_jsonl(folder / "test.jsonl", [{"prompt": "11+22+33="}])
    recipe = load_recipe(
        None,
        [f"data={{source: {folder}, eval_split: test, max_prompt_length: 6}}", "evaluation.every=1"],
    )
    data = load(tokenizer, source=str(folder), eval_split="test", max_prompt_length=6)
    with pytest.raises(DataError, match="every eval prompt is longer than data.max_prompt_length"):
        held_out_reward(SimpleNamespace(recipe=recipe, data=data))


def test_limit_keeps_a_seeded_sample(tokenizer) -> None:
    section = small_arithmetic(num_train=50, num_eval=20)
    full = load(tokenizer, seed=3, **section)
    limited = load(tokenizer, seed=3, limit=10, **section)
    assert len(limited.train) == 10 and len(limited.eval) == 10
    full_rows = rows_of(full.train)
    assert all(row in full_rows for row in rows_of(limited.train))
    assert rows_of(load(tokenizer, seed=3, limit=10, **section).train) == rows_of(limited.train)
    # A limit above the size keeps every row, in order.
    assert rows_of(load(tokenizer, seed=3, limit=500, **section).train) == full_rows


# ----------------------------------------------------------------------------------------------------
# Tokens
# ----------------------------------------------------------------------------------------------------


def test_tokenize_prompts_matches_the_tokenizer(tokenizer, tmp_path: Path) -> None:
    data = load(tokenizer, source=str(write_jsonl(tmp_path / "d.jsonl", ROWS)))
    tokens = tokenize_prompts(data.train, tokenizer)
    assert tokens.column_names == ["input_ids", "row_index"]
    assert tokens["row_index"] == list(range(len(ROWS)))
    for row in tokens:
        text = data.train[row["row_index"]]["prompt"]
        assert row["input_ids"] == tokenizer(text)["input_ids"]
    # Known ids: <bos>=1, digits from 4, "+"=14, "="=15.
    assert tokens[0]["input_ids"] == [1, 5, 14, 6, 15]


def test_tokenize_chat_prompts_applies_the_template(chat_tokenizer) -> None:
    data = load(chat_tokenizer, system_prompt="0", **small_arithmetic(num_train=6, num_eval=0))
    tokens = tokenize_prompts(data.train, chat_tokenizer)
    assert tokens["row_index"] == list(range(6))
    for row, prompt in zip(tokens, data.train["prompt"], strict=True):
        rendered = f"0 {prompt[1]['content']}="
        assert row["input_ids"] == chat_tokenizer(rendered, add_special_tokens=False)["input_ids"]


def test_prompt_token_ids_of_text_is_the_plain_tokenizer(tokenizer) -> None:
    assert prompt_token_ids("3+4=", tokenizer) == tokenizer("3+4=")["input_ids"] == [1, 7, 14, 8, 15]


def test_tokenized_prompts_keep_their_row_index() -> None:
    tokenizer = build_tokenizer()
    rows = Dataset.from_dict({"prompt": ["1+2=", "3+4="], "answer": ["3", "7"]})
    tokens = tokenize_prompts(rows, tokenizer)
    assert tokens.column_names == ["input_ids", "row_index"]
    assert tokens["row_index"] == [0, 1]
