"""The data a flat TRL-style GRPO file trains on: one dataset (`dataset_name` and its splits), TRL's
`datasets:` mixture or open-r1's `dataset_mixture`, as our `data:` section."""

from __future__ import annotations

from typing import Any

from llm_rl.errors import RecipeError
from llm_rl.recipe.accounting import Migration, put

# Script arguments that name the data: TRL's (`dataset_*`, and `datasets` with `streaming` and
# `test_split_size`, its DatasetMixtureConfig) and open-r1's `dataset_mixture`.
DATA_KEYS = (
    "dataset_name", "dataset_config", "dataset_train_split", "dataset_test_split", "dataset_streaming",
    "datasets", "streaming", "test_split_size", "dataset_mixture",
)  # fmt: skip
NO_STREAMING = "llm_rl reads the whole dataset before training (no streaming): not carried"


def import_data(flat: dict[str, Any], out: Migration) -> None:
    """The data the source trains on: one dataset, TRL's `datasets:` mixture or open-r1's
    `dataset_mixture`; the mixture wins where both are given, as in both scripts."""
    mixture = flat.get("datasets") or (flat.get("dataset_mixture") or {}).get("datasets")
    if mixture:
        import_mixture(flat, out)
    elif flat.get("dataset_name"):
        import_single_dataset(flat, out)
    else:
        for key in ("dataset_name", "dataset_config", "dataset_train_split", "dataset_test_split"):
            if key in flat:
                out.keep(key, flat[key], "-", "names no dataset")
        out.warn(
            "(no dataset)",
            None,
            "the source names no dataset: the recipe trains on builtin:arithmetic, the toy task; set data.source",
            "data.source",
        )
    for key in ("dataset_streaming", "streaming"):
        if key in flat:
            if flat[key]:
                out.warn(key, flat[key], NO_STREAMING)
            else:
                out.keep(key, flat[key], "-", "off, as in llm_rl")


def import_single_dataset(flat: dict[str, Any], out: Migration) -> None:
    """`dataset_name` with its configuration and splits."""
    for key, target in (
        ("dataset_name", "data.source"),
        ("dataset_config", "data.config"),
        ("dataset_train_split", "data.split"),
        ("dataset_test_split", "data.eval_split"),
    ):
        if flat.get(key) is not None:
            put(out.recipe, target, flat[key])
            out.keep(key, flat[key], target)
        elif key in flat:
            out.keep(key, None, "-", "null: not set")
    for key in ("datasets", "dataset_mixture", "test_split_size"):
        if key in flat:
            out.warn(key, flat[key], "empty or unused by the source: not carried")


def import_mixture(flat: dict[str, Any], out: Migration) -> None:
    """TRL's `datasets:` list or open-r1's `dataset_mixture` as `data.sources`."""
    trl_style = bool(flat.get("datasets"))
    key = "datasets" if trl_style else "dataset_mixture"
    entries = flat["datasets"] if trl_style else flat["dataset_mixture"]["datasets"]
    listed_under = "datasets" if trl_style else "dataset_mixture.datasets"
    sources = []
    for index, entry in enumerate(entries):
        where = f"{listed_under}[{index}]"
        if not isinstance(entry, dict):
            raise RecipeError(f"{where}: a dataset of the mixture must be a mapping (path, split, ...)")
        source = (
            import_trl_dataset(entry, where, out) if trl_style else import_open_r1_dataset(entry, where, out)
        )
        sources.append(source)
        out.keep(where, entry, f"data.sources[{index}]")
    weighted = [index for index, source in enumerate(sources) if "weight" in source]
    if weighted and len(weighted) < len(sources):
        unweighted = next(index for index in range(len(sources)) if index not in weighted)
        field = "fraction" if trl_style else "weight"
        raise RecipeError(
            f"{listed_under}[{unweighted}].{field}: set on other datasets of the mixture and not on this one; set it on every "
            "dataset or on none (the source's own script refuses this file too)"
        )
    put(out.recipe, "data.sources", sources)
    size_key = "test_split_size" if trl_style else "dataset_mixture.test_split_size"
    size = flat.get("test_split_size") if trl_style else flat["dataset_mixture"].get("test_split_size")
    if size is not None:
        put(out.recipe, "data.eval_size", size)
        out.keep(size_key, size, "data.eval_size", "held out of the mixture, seeded by run.seed")
    if not trl_style:
        seed = flat["dataset_mixture"].get("seed")
        if seed is not None:
            out.keep("dataset_mixture.seed", seed, "-", "llm_rl shuffles each source with run.seed")
    for other in ("dataset_name", "dataset_config", "dataset_train_split", "dataset_test_split"):
        if other in flat:
            out.warn(other, flat[other], f"unused: the source's script reads {key} when both are given")
    if not trl_style and "datasets" in flat:
        out.warn("datasets", flat["datasets"], "empty: the mixture is dataset_mixture's")


def import_trl_dataset(entry: dict[str, Any], where: str, out: Migration) -> dict[str, Any]:
    """One entry of TRL's `datasets:` (its DatasetConfig) as one of `data.sources`."""
    path = entry.get("path")
    files = entry.get("data_files")
    source: dict[str, Any] = {"source": path}
    if path in GENERIC_BUILDERS and isinstance(files, str):
        source["source"] = files  # `path: json, data_files: x.jsonl` is the file x.jsonl
    elif files is not None:
        out.warn(
            f"{where}.data_files",
            files,
            "llm_rl reads a hub dataset's own files or one local file: not carried",
        )
    if not isinstance(source["source"], str):
        raise RecipeError(f"{where}.path: each dataset of the mixture needs a path or hub id")
    source |= renamed_fields(entry, {"name": "config", "split": "split", "columns": "columns"})
    if entry.get("fraction") is not None:
        source["weight"] = float(entry["fraction"])
    if entry.get("data_dir") is not None:
        out.warn(
            f"{where}.data_dir",
            entry["data_dir"],
            "llm_rl reads the whole hub dataset: download the folder you need and name it as the source",
        )
    unknown = sorted(set(entry) - {"path", "name", "data_dir", "data_files", "split", "columns", "fraction"})
    for name in unknown:
        out.warn(f"{where}.{name}", entry[name], "not a field of TRL's DatasetConfig: not carried")
    return source


def import_open_r1_dataset(entry: dict[str, Any], where: str, out: Migration) -> dict[str, Any]:
    """One entry of open-r1's `dataset_mixture.datasets` as one of `data.sources`."""
    if not isinstance(entry.get("id"), str):
        raise RecipeError(f"{where}.id: each dataset of the mixture needs a hub id or path")
    source: dict[str, Any] = {"source": entry["id"]}
    source |= renamed_fields(entry, {"config": "config", "split": "split", "columns": "columns"})
    if entry.get("weight") is not None:
        source["weight"] = float(entry["weight"])
        out.warn(
            f"{where}.weight",
            entry["weight"],
            "open-r1 keeps this fraction of the dataset's rows; llm_rl's weight is the dataset's share of "
            "the mixture (TRL's fraction): the shares differ where the datasets' sizes do",
            "data.sources[].weight",
        )
    for name in sorted(set(entry) - {"id", "config", "split", "columns", "weight"}):
        out.warn(f"{where}.{name}", entry[name], "not a field of open-r1's DatasetConfig: not carried")
    return source


def renamed_fields(entry: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """The entry's fields named in `names` (theirs -> ours) that it sets, under our names."""
    return {ours: entry[theirs] for theirs, ours in names.items() if entry.get(theirs) is not None}


# `datasets` builders that read the files named in `data_files`.
GENERIC_BUILDERS = {"json", "csv", "parquet"}
