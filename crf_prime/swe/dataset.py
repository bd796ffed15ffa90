"""Load SWE-bench instances from Hugging Face or a local .json / .jsonl / .parquet file, and filter them.

Hugging Face loading needs the ``hf`` extra (``datasets``); local JSON needs nothing; local parquet needs
``pyarrow`` (installed with ``datasets``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from crf_prime.errors import InputError
from crf_prime.extras import require
from crf_prime.swe.instance import InstanceError, SweInstance, parse_instance

LITE = "princeton-nlp/SWE-bench_Lite"
"""Default dataset; splits ``test`` (300 rows) and ``dev`` (23 rows)."""

LOCAL_SUFFIXES = (".json", ".jsonl", ".parquet")


class DatasetNotFoundError(InputError, FileNotFoundError):
    """The dataset source names neither an existing local file nor a loadable Hugging Face dataset."""


def _looks_local(source: str) -> bool:
    return source.endswith(LOCAL_SUFFIXES) or source.startswith((".", "/", "~")) or Path(source).exists()


def _rows_json(path: Path) -> Iterator[tuple[str, Any]]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InstanceError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
    if isinstance(data, dict) and "instance_id" not in data:
        # {"instance_id": row, ...} or {"rows": [...]}-like wrappers are not SWE-bench files
        raise InstanceError(f"{path}: expected a JSON list of rows (or one row object), got an object")
    rows = data if isinstance(data, list) else [data]
    for i, row in enumerate(rows):
        yield f"{path}[{i}]", row


def _rows_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise InstanceError(f"{path}:{lineno}: invalid JSON: {e.msg}") from None
            yield f"{path}:{lineno}", row


def _rows_parquet(path: Path) -> Iterator[tuple[str, Any]]:
    pq = require("pyarrow.parquet", "hf")
    for i, row in enumerate(pq.read_table(path).to_pylist()):
        yield f"{path}[row {i}]", row


def _rows_hf(name: str, split: str) -> Iterator[tuple[str, Any]]:
    datasets = require("datasets", "hf")
    try:
        ds = datasets.load_dataset(name, split=split)
    except FileNotFoundError as e:
        raise DatasetNotFoundError(f"dataset {name!r} (split {split!r}) not found: {e}") from e
    except ValueError as e:  # unknown split
        raise DatasetNotFoundError(f"dataset {name!r}: {e}") from e
    except ConnectionError as e:  # hub unreachable / offline mode and not cached
        raise DatasetNotFoundError(
            f"dataset {name!r} (split {split!r}) could not be fetched from the Hugging Face hub and is not cached: {e}; "
            "pass a local .json/.jsonl/.parquet export instead"
        ) from e
    for i, row in enumerate(ds):
        yield f"{name}[{split}][{i}]", row


def iter_rows(source: str, split: str = "test") -> Iterator[tuple[str, Any]]:
    """Raw ``(where, row)`` pairs from a local file or a Hugging Face dataset id."""
    if _looks_local(source):
        path = Path(source).expanduser()
        if not path.is_file():
            raise DatasetNotFoundError(
                f"dataset file {str(path)!r} does not exist (expected a .json, .jsonl or .parquet file "
                f"or a Hugging Face dataset id such as {LITE!r})"
            )
        if path.suffix == ".jsonl":
            return _rows_jsonl(path)
        if path.suffix == ".json":
            return _rows_json(path)
        if path.suffix == ".parquet":
            return _rows_parquet(path)
        raise DatasetNotFoundError(
            f"dataset file {str(path)!r}: unsupported suffix {path.suffix!r}; use {LOCAL_SUFFIXES}"
        )
    return _rows_hf(source, split)


def load_instances(
    source: str = LITE,
    split: str = "test",
    *,
    instance_ids: Sequence[str] | None = None,
    repos: Sequence[str] | None = None,
) -> list[SweInstance]:
    """Validated instances from ``source``, keeping only ``instance_ids`` / ``repos`` when given.

    Every row is validated (a bad row raises :class:`InstanceError` naming it); duplicate ids and requested ids
    that are absent raise too, so a typo never silently shrinks a run.
    """
    instances = [parse_instance(row, where=where) for where, row in iter_rows(source, split)]
    seen: set[str] = set()
    for inst in instances:
        if inst.instance_id in seen:
            raise InstanceError(f"{source}: duplicate instance_id {inst.instance_id!r}")
        seen.add(inst.instance_id)
    return filter_instances(instances, instance_ids=instance_ids, repos=repos, source=source)


def filter_instances(
    instances: Iterable[SweInstance],
    *,
    instance_ids: Sequence[str] | None = None,
    repos: Sequence[str] | None = None,
    source: str = "dataset",
) -> list[SweInstance]:
    """Keep instances whose id is in ``instance_ids`` and whose repo is in ``repos`` (None = no filter)."""
    out = list(instances)
    if repos:
        wanted_repos = set(repos)
        out = [i for i in out if i.repo in wanted_repos]
    if instance_ids:
        wanted = list(dict.fromkeys(instance_ids))
        by_id = {i.instance_id: i for i in out}
        missing = [i for i in wanted if i not in by_id]
        if missing:
            raise InstanceError(
                f"{source}: instance ids not found{' for the selected repos' if repos else ''}: {missing}"
            )
        out = [by_id[i] for i in wanted]
    return out
