"""`llm-rl migrate`: a GRPO recipe into a PPO recipe (and back), with an account of every source key.

Two kinds of source are read: our own recipes (their `extends:` chain resolved) and the flat
TRL-style YAMLs that public TRL-based projects use (GRPOConfig fields at the top level, plus the
script arguments `model_name_or_path`, `dataset_name`, `reward_funcs`, ...). A flat file is first
imported into our GRPO schema, then converted. Each source key gets one row in the printed table:
where it went, or why it has no counterpart (a warning). No key is dropped silently.

What the conversion keeps and what it changes is documented in docs/migration.md.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from llm_rl.algorithms.base import Algorithm, Counterpart, Idea
from llm_rl.algorithms.registry import ALGORITHMS, known_names
from llm_rl.errors import RecipeError
from llm_rl.recipe.accounting import KeyFate, Migration, get, leaves, put, remove
from llm_rl.recipe.files import read_recipe_file, read_yaml_mapping
from llm_rl.recipe.load import apply_override, validate_recipe
from llm_rl.recipe.trl_import.grpo import import_flat
from llm_rl.recipe.trl_import.ppo import import_trl_ppo
from llm_rl.recipe.trl_import.ppo_keys import check_not_legacy, is_trl_ppo
from llm_rl.recipe.trl_launch import import_launch, is_launch_file
from llm_rl.schema import Recipe
from llm_rl.training.args import assumed_world_size, world_size

# ----------------------------------------------------------------------------------------------------
# Reading the source
# ----------------------------------------------------------------------------------------------------


NEITHER_FORMAT = (
    "migrate reads llm_rl recipes and flat TRL-style GRPO YAMLs (GRPOConfig fields and script arguments "
    "such as model_name_or_path at the top level); this file has sections of another format: write its "
    "settings as one of those"
)


def read_source(path: Path) -> tuple[dict[str, Any], bool]:
    """The source recipe as a mapping (extends resolved) and whether it is a flat TRL-style file."""
    raw = read_yaml_mapping(path)
    ours = set(Recipe.model_fields) | set(ALGORITHMS) | {"extends"}
    if any(key in ours and isinstance(value, dict | list | str) for key, value in raw.items()):
        return read_recipe_file(path), False
    return raw, True


# ----------------------------------------------------------------------------------------------------
# GRPO -> PPO and back, on our schema
# ----------------------------------------------------------------------------------------------------


def convert(
    source: dict[str, Any], source_algorithm: str, target: str, out: Migration, chosen: dict[str, Any]
) -> None:
    """The recipe as one for `target`, into `out` with a row for each setting of the source's section.
    `chosen` holds the target section's settings given with `--set` (PPO's advantage estimator, say):
    the conversion reads them, so that what counts as a counterpart follows them."""
    recipe = copy.deepcopy(source)
    recipe["algorithm"] = target
    recipe[target] = copy.deepcopy(chosen)
    section = {**chosen, **convert_section(recipe, ALGORITHMS[source_algorithm], ALGORITHMS[target], out)}
    for key, value, note in ALGORITHMS[target].complete_migration(recipe, section):
        out.keep("(added)", value, f"{target}.{key}", note)
    recipe[target] = section
    override_shared(recipe, ALGORITHMS[target], out)
    out.recipe = recipe


def convert_section(
    recipe: dict[str, Any], source: Algorithm, target: Algorithm, out: Migration
) -> dict[str, Any]:
    """Pop the source algorithm's section and return it as the target's: settings both have under other
    names renamed (the source's TRL defaults carried where the target's differ), keys both take kept,
    the rest warned about: with the target's reason where it has no setting for the key's idea
    (`Algorithm.lacking`), else with the target's keys for that idea (`Algorithm.KEY_IDEAS`). `recipe`
    may hold the target's section with the settings chosen for it."""
    section = recipe.pop(source.NAME, {}) or {}
    fields = target.section_fields()
    renames = {
        mine.key: (target.COUNTERPARTS[shared].key, rename_note(mine, target.COUNTERPARTS[shared]))
        for shared, mine in source.COUNTERPARTS.items()
        if shared in target.COUNTERPARTS
    }
    # The source's TRL defaults are carried where the target would read the setting otherwise: under
    # another name, or with another default (GRPO's beta is 0, RLOO's 0.05).
    defaults = {
        mine.key: mine.default
        for shared, mine in source.COUNTERPARTS.items()
        if mine.default is not None
        and shared in target.COUNTERPARTS
        and (mine.key, mine.default) != (target.COUNTERPARTS[shared].key, target.COUNTERPARTS[shared].default)
    }
    lacking = target.lacking({**recipe, "algorithm": source.NAME, source.NAME: section})
    converted: dict[str, Any] = {}
    for key, value in {**defaults, **section}.items():
        origin = f"{source.NAME}.{key}" if key in section else f"{source.NAME}.{key} (TRL default)"
        idea = source.KEY_IDEAS.get(key)
        if key in renames:
            name, note = renames[key]
            converted[name] = value
            out.keep(origin, value, f"{target.NAME}.{name}", note)
        elif idea in lacking:
            out.warn(origin, value, f"no {target.NAME.upper()} counterpart: {lacking[idea]}")
        elif key in fields:
            converted[key] = value
            out.keep(origin, value, f"{target.NAME}.{key}")
        else:
            out.warn(origin, value, f"no {target.NAME.upper()} counterpart{nearest_key(target, idea)}")
    return converted


def nearest_key(target: Algorithm, idea: Idea | None) -> str:
    """'; nearest: ppo.whiten_rewards' where the target sets the same idea with keys of its own."""
    keys = [key for key, its_idea in target.KEY_IDEAS.items() if idea is not None and its_idea == idea]
    return f"; nearest: {', '.join(f'{target.NAME}.{key}' for key in keys)}" if keys else ""


# `get`'s answer for a key the recipe leaves out.
ABSENT = object()


def override_shared(recipe: dict[str, Any], target: Algorithm, out: Migration) -> None:
    """The shared settings the target cannot run as the source set them (`SHARED_OVERRIDES`): each set to
    the value it runs or left out, with a row; a warning where the source's value was not the default."""
    defaults = Recipe().to_dict()
    for dotted, (value, why) in target.SHARED_OVERRIDES.items():
        current = get(recipe, dotted, ABSENT)
        if current is ABSENT or (value is not None and current == value):
            continue
        if value is not None:
            put(recipe, dotted, value)
            out.warn(dotted, current, f"now {value!r}: {why}", dotted)
            continue
        remove(recipe, dotted)
        note = f"no {target.NAME.upper()} counterpart: {why}"
        if current == get(defaults, dotted):
            out.keep(dotted, current, "-", note)
        else:
            out.warn(dotted, current, note)


def rename_note(mine: Counterpart, theirs: Counterpart) -> str:
    """What a renamed setting means on both sides."""
    if mine.meaning == theirs.meaning:
        return mine.meaning
    return f"{mine.meaning}; {theirs.meaning}: same value, another place"


def rename_run(recipe: dict[str, Any], source_algorithm: str, target: str, out: Migration) -> None:
    """A new run name and folder, so the migrated run never resumes from the source run's checkpoints."""
    for key in ("run.name", "run.output_dir"):
        value = get(recipe, key)
        if not isinstance(value, str):
            continue
        renamed = (
            value.replace(source_algorithm, target) if source_algorithm in value else f"{value}-{target}"
        )
        put(recipe, key, renamed)
        out.keep(key, value, key, f"now {renamed!r}: a new folder, so it never resumes the source run")


def account_for_kept_keys(source: dict[str, Any], out: Migration) -> None:
    """A row for every source key the conversion carried unchanged: those without a row of their own."""
    accounted = {row.source for row in out.rows}
    for dotted, value in leaves(source):
        if dotted.split(".")[0] in (*ALGORITHMS, "algorithm") or dotted in accounted:
            continue
        out.keep(dotted, value, dotted, "kept")


def migrate(
    path: Path,
    target: str,
    warm_start: str | None = None,
    processes: int | None = None,
    command: int | None = None,
    overrides: list[str] | None = None,
) -> Migration:
    """Convert the recipe at `path` to `target` (an algorithm's name), checked as `target` would run it
    on `processes` processes (default: this launch's, 1 for a plain command); `command` picks one launch
    command out of a shell file that holds several; `overrides` (`dotted.key=value`) set keys of the
    result, those of the target's section before the conversion reads it."""
    if target not in ALGORITHMS:
        raise RecipeError(f"--to: input should be {known_names()}, got {target!r}")
    if processes is not None and processes < 1:
        raise RecipeError(f"--processes: a run has at least 1 process, got {processes}")
    with assumed_world_size(processes or world_size()):
        migration = convert_file(path, target, warm_start, command, overrides or [])
        try:
            validate_recipe(copy.deepcopy(migration.recipe), where=f"{path} migrated to {target}")
        except RecipeError as err:
            if processes is None and "processes" in str(err):
                raise RecipeError(
                    f"{err} (checked as {world_size()} process(es): give --processes N for the run's number "
                    "of processes)"
                ) from None
            raise
    return migration


def convert_file(
    path: Path,
    target: str,
    warm_start: str | None,
    command: int | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> Migration:
    """The recipe at `path` converted to `target`, each source key accounted for, not yet checked as a run.

    `path` is one of our recipes, a flat TRL-style YAML or JSON, or a shell file with a TRL launch command
    (the `command`-th when it holds several)."""
    chosen: dict[str, Any] = {}
    for override in overrides:
        apply_override(chosen, override, where="--set")
    launch_rows: list[KeyFate] = []
    script = None
    if is_launch_file(path):
        raw, launch_rows, launch = import_launch(path, command)
        flat, script = True, launch.script
    else:
        if command is not None:
            raise RecipeError(
                "--command picks a launch command out of a shell file; this is a recipe", where=path
            )
        raw, flat = read_source(path)
    imported = None
    if flat:
        try:
            check_not_legacy(raw, str(path))
            imported = import_trl_ppo(raw, script) if is_trl_ppo(raw, script) else import_flat(raw)
        except RecipeError as err:
            raise RecipeError(str(err), where=str(path)) from None
        imported.rows = [*launch_rows, *imported.rows]
    source = imported.recipe if imported else raw
    try:
        validate_recipe(
            copy.deepcopy(source), where=f"{path} (imported)" if flat else str(path), as_source=True
        )
    except RecipeError as err:
        if flat or "unknown key" not in str(err):
            raise
        raise RecipeError(f"{err}. {NEITHER_FORMAT}") from None
    source_algorithm = source.get("algorithm", Recipe.model_fields["algorithm"].default)
    out = Migration({})
    if not flat:
        out.keep("algorithm", source_algorithm, "algorithm", f"now {target}")
    if source_algorithm == target:
        out.recipe = copy.deepcopy(source)
    else:
        convert(source, source_algorithm, target, out, chosen.get(target) or {})
        rename_run(out.recipe, source_algorithm, target, out)
    for dotted, value in leaves(chosen):
        put(out.recipe, dotted, value)
        out.keep("(--set)", value, dotted)
    if not flat:
        account_for_kept_keys(source, out)
    if imported:
        out.rows = chain_rows(imported.rows, out.rows)
    if warm_start is not None:
        out.keep(
            "(added)", warm_start, "model.policy", f"warm start; was {get(out.recipe, 'model.policy')!r}"
        )
        put(out.recipe, "model.policy", warm_start)
    return out


def chain_rows(imported: list[KeyFate], converted: list[KeyFate]) -> list[KeyFate]:
    """One row per flat source key: where the import put it, followed through the conversion."""
    pending = list(converted)
    chained = []
    for row in imported:
        then = next((c for c in pending if c.source == row.target), None)
        if then is None:
            chained.append(row)
            continue
        pending.remove(then)
        note = "; ".join(part for part in (row.note, then.note) if part)
        chained.append(KeyFate(row.source, row.value, then.target, note, row.warning or then.warning))
    return chained + pending


def in_schema_order(recipe: dict[str, Any]) -> dict[str, Any]:
    """The recipe's sections in the order the schema lists them (algorithm first)."""
    order = list(Recipe.model_fields)
    return dict(
        sorted(recipe.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order))
    )


def settings_count(count: int) -> str:
    """'1 source setting', '3 source settings'."""
    return f"{count} source setting{'' if count == 1 else 's'}"


def write_recipe(migration: Migration, source: Path, output: Path, target: str) -> None:
    """The migrated recipe as YAML, with a header naming its source and its warnings."""
    header = [
        f"# Migrated from {source} to {target} by `llm-rl migrate`.",
        f"# {settings_count(len(migration.warnings))} had no {target.upper()} counterpart (see the table it printed).",
    ]
    body = yaml.safe_dump(in_schema_order(migration.recipe), sort_keys=False, allow_unicode=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f".{output.name}.partial")
    partial.write_text("\n".join(header) + "\n" + body)
    partial.replace(output)
