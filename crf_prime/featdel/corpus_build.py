"""Assemble a corpus directory from its finished packages.

Writes, each file replaced atomically: ``tasks.jsonl`` (the task rows ``load_tasks`` and the feature-deletion
taskset read), ``index.jsonl`` (one :class:`TaskMeta` per row: split, project, licence, difficulty proxies),
``bases/`` and ``replay/`` (the files the rows name), ``duplicates.jsonl`` (what was dropped and why),
``summary.json`` and ``README.md`` (the dataset card). Duplicates: the first task in source order wins; exact copies
(same deleted text) then near copies (same code under other names). Split: whole projects, ordered by a hash of
their name, go to ``eval`` until it holds ``eval_fraction`` of the tasks; no project is on both sides.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import Counter, defaultdict
from pathlib import Path

from pydantic import BaseModel, Field

from crf_prime.extras import require
from crf_prime.featdel.corpus_meta import TaskMeta
from crf_prime.featdel.generate import load_tasks
from crf_prime.featdel.granularity import GRANULARITIES, granularity_of
from crf_prime.featdel.models import FeatdelTask, GenerateSummary, PackageStatus, RateStats, SourceLine
from crf_prime.featdel.source import SourceError

SPLITS = ("train", "eval")


class PackageRow(BaseModel):
    """One package's line in the summary and the dataset card."""

    spec: str
    status: str
    license: str = ""
    tasks: int = 0
    """Validated tasks the package produced (before duplicate removal)."""
    kept: int = 0
    """Tasks in the corpus (after duplicate removal)."""
    split: str = ""
    suite_tests: int = 0
    seconds: float = 0.0
    turns: int = 1
    """Runs that made its tasks (``PackageStatus.turns``)."""
    reason: str = ""
    setup: list[str] = Field(default_factory=list)
    """What the setup loop did to run the suite (installed test dependencies, discovery, ignored modules,
    deselected tests); empty when the suite ran as shipped."""
    deselected: list[str] = Field(default_factory=list)
    """Node ids the setup loop left out, each with its reason."""


class CorpusSummary(BaseModel):
    """``summary.json`` of a corpus."""

    tasks: int
    splits: dict[str, int]
    packages_done: int
    packages_failed: int
    packages_partial: int = 0
    """Packages the time limit stopped after they validated tasks (in the corpus; they run again when it is
    resumed)."""
    packages_cancelled: int = 0
    """Packages the time limit stopped before they had tasks (they run again when the corpus is resumed)."""
    duplicates_exact: int
    duplicates_near: int
    by_granularity: dict[str, dict[str, int]] = Field(default_factory=dict)
    """granularity -> {"valid": validated tasks, "rejected": rejected candidates, "kept": tasks in the corpus}."""
    rejected: dict[str, int] = Field(default_factory=dict)
    """Rejected candidates by reason, over all packages."""
    packages: dict[str, PackageRow] = Field(default_factory=dict)
    mutation: RateStats | None = None
    """The grader's mutation rate over the corpus's tasks (crf_prime/featdel/strength.py)."""
    mutation_by_package: dict[str, RateStats] = Field(default_factory=dict)
    """package slug -> its tasks' mutation rates."""
    mutation_by_granularity: dict[str, RateStats] = Field(default_factory=dict)


def split_projects(counts: dict[str, int], eval_fraction: float) -> dict[str, str]:
    """project -> "train" | "eval": projects in hash order go to eval until it holds ``eval_fraction`` of the tasks
    (at least one project when there are two or more and the fraction is positive; never all of them)."""
    order = sorted(counts, key=lambda p: hashlib.sha256(p.encode()).hexdigest())
    total = sum(counts.values())
    out = dict.fromkeys(order, "train")
    held = 0
    for p in order[:-1] if len(order) > 1 else []:
        if eval_fraction <= 0 or held >= eval_fraction * total:
            break
        out[p] = "eval"
        held += counts[p]
    return out


def _link(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def assemble(
    out: Path, lines: list[SourceLine], statuses: dict[str, PackageStatus], *, eval_fraction: float
) -> CorpusSummary:
    """Build the corpus files under ``out`` from the finished packages of ``lines``."""
    rows: list[tuple[FeatdelTask, TaskMeta, Path]] = []
    slug_of: dict[str, str] = {}
    packages: dict[str, PackageRow] = {}
    gran: dict[str, Counter[str]] = defaultdict(Counter)
    rejected: Counter[str] = Counter()
    for s in lines:
        st = statuses[s.slug]
        pkg = out / "packages" / s.slug
        row = PackageRow(
            spec=s.spec,
            status=st.status,
            license=st.license,
            tasks=st.tasks,
            seconds=st.seconds,
            turns=st.turns,
            reason=st.reason.splitlines()[0][:300] if st.reason else "",
            setup=st.setup.actions() if st.setup else [],
            deselected=[f"{n}: {why}" for n, why in st.setup.deselected.items()] if st.setup else [],
        )
        if st.status in ("done", "partial"):
            generated = GenerateSummary.model_validate_json((pkg / "tasks" / "summary.json").read_text())
            row.suite_tests = generated.suite_tests
            for r in generated.rejections:
                gran[granularity_of(r.candidate)]["rejected"] += 1
                rejected[r.reason] += 1
            tasks = load_tasks(pkg / "tasks")
            metas = [TaskMeta.model_validate_json(x) for x in (pkg / "meta.jsonl").read_text().splitlines() if x]
            for t, m in zip(tasks, metas, strict=True):
                gran[m.granularity]["valid"] += 1
                rows.append((t, m, pkg / "tasks"))
                slug_of[t.task_id] = s.slug
        packages[s.slug] = row

    kept: list[tuple[FeatdelTask, TaskMeta, Path]] = []
    dups: list[dict[str, str]] = []
    seen: dict[tuple[str, str], str] = {}
    for t, m, d in rows:
        hit = next(
            (
                (kind, seen[(kind, k)])
                for kind, k in (("exact", m.exact_key), ("near", m.near_key))
                if (kind, k) in seen
            ),
            None,
        )
        if hit:
            dups.append({"task_id": t.task_id, "kind": hit[0], "duplicate_of": hit[1]})
            continue
        seen[("exact", m.exact_key)] = seen[("near", m.near_key)] = t.task_id
        kept.append((t, m, d))

    per_project = Counter(m.project for _, m, _ in kept)
    split = split_projects(dict(per_project), eval_fraction)
    kept = [(t, m.model_copy(update={"split": split[m.project]}), d) for t, m, d in kept]
    kept.sort(key=lambda r: (SPLITS.index(r[1].split), 0))  # train rows first, source order inside a split
    for _, m, _ in kept:
        row = packages[slug_of[m.task_id]]
        row.kept += 1
        row.split = m.split
    for _, m, _ in kept:
        gran[m.granularity]["kept"] += 1

    staging = out / ".assemble"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for t, _, d in kept:
        for rel in [t.base_archive, *([t.replay.calls_file, t.replay.expected_file] if t.replay else [])]:
            if not (staging / rel).exists():
                _link(d / rel, staging / rel)
    (staging / "tasks.jsonl").write_text("".join(t.model_dump_json() + "\n" for t, _, _ in kept))
    (staging / "index.jsonl").write_text("".join(m.model_dump_json() + "\n" for _, m, _ in kept))
    (staging / "duplicates.jsonl").write_text("".join(json.dumps(x) + "\n" for x in dups))
    summary = CorpusSummary(
        tasks=len(kept),
        splits={s: sum(1 for _, m, _ in kept if m.split == s) for s in SPLITS},
        packages_done=sum(1 for r in packages.values() if r.status == "done"),
        packages_failed=sum(1 for r in packages.values() if r.status == "failed"),
        packages_partial=sum(1 for r in packages.values() if r.status == "partial"),
        packages_cancelled=sum(1 for r in packages.values() if r.status == "cancelled"),
        duplicates_exact=sum(1 for x in dups if x["kind"] == "exact"),
        duplicates_near=sum(1 for x in dups if x["kind"] == "near"),
        by_granularity={g: {k: gran[g][k] for k in ("valid", "rejected", "kept")} for g in GRANULARITIES},
        rejected=dict(sorted(rejected.items())),
        packages=packages,
        **mutation_tables([(slug_of[m.task_id], m) for _, m, _ in kept]),
    )
    (staging / "summary.json").write_text(summary.model_dump_json(indent=2) + "\n")
    (staging / "README.md").write_text(dataset_card(summary, [m for _, m, _ in kept]))
    _publish(staging, out)
    return summary


def mutation_tables(rows: list[tuple[str, TaskMeta]]) -> dict:
    """CorpusSummary's mutation fields from (package slug, row) pairs: overall, per package, per granularity (none
    when no task was measured: generation ran without mutants)."""
    if all(m.mutation is None for _, m in rows):
        return {}
    by_pkg: dict[str, list[TaskMeta]] = defaultdict(list)
    by_gran: dict[str, list[TaskMeta]] = defaultdict(list)
    for slug, m in rows:
        by_pkg[slug].append(m)
        by_gran[m.granularity].append(m)
    return {
        "mutation": RateStats.of([m.mutation for _, m in rows]),
        "mutation_by_package": {k: RateStats.of([m.mutation for m in v]) for k, v in by_pkg.items()},
        "mutation_by_granularity": {
            g: RateStats.of([m.mutation for m in by_gran[g]]) for g in GRANULARITIES if g in by_gran
        },
    }


def mutation_card(summary: CorpusSummary) -> list[str]:
    """The dataset card's section on the grader's mutation rate (median and 5th percentile per group)."""
    if summary.mutation is None:
        return []
    lines = [
        "",
        "## The grader's strength (mutation rate)",
        "",
        "Each task's gold code was mutated with standard operators (comparison, boolean and arithmetic swaps,",
        "constants, removed statements and branches, changed returns) and every mutant graded as the task is served",
        "(target tests + call replay). Rate = mutants the grader scores 0 / behaviour-changing mutants (rejected, or",
        "different from gold on held-out calls the grader does not replay). A task is kept only when its rate reaches",
        f"the generation's minimum. Overall: {summary.mutation.line()}.",
        "",
        "| group | tasks | median | p5 | mutants rejected / behaviour-changing | unmeasured |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    groups = [
        *summary.mutation_by_granularity.items(),
        *((summary.packages[k].spec, v) for k, v in summary.mutation_by_package.items()),
    ]
    for name, st in groups:
        med = f"{st.median:.0%}" if st.median is not None else "-"
        p5 = f"{st.p5:.0%}" if st.p5 is not None else "-"
        lines.append(
            f"| {name} | {st.tasks} | {med} | {p5} | {st.rejected}/{st.behaviour_changing} | {st.unmeasured} |"
        )
    return lines


def _publish(staging: Path, out: Path) -> None:
    """Move the staged files over the corpus's (directories swapped whole, files replaced atomically)."""
    for name in ("bases", "replay"):
        old = out / f".{name}.old"
        shutil.rmtree(old, ignore_errors=True)
        if (out / name).exists():
            (out / name).rename(old)
        if (staging / name).exists():
            (staging / name).rename(out / name)
        shutil.rmtree(old, ignore_errors=True)
    # tasks.jsonl last: a reader never sees rows whose files are not in place
    for name in ("index.jsonl", "duplicates.jsonl", "summary.json", "README.md", "tasks.jsonl"):
        (staging / name).replace(out / name)
    shutil.rmtree(staging, ignore_errors=True)


def dataset_card(summary: CorpusSummary, metas: list[TaskMeta]) -> str:
    """README.md of the corpus: what it is, how it was made, per-package and per-granularity tables."""
    lines = [
        "# Feature Deletion corpus",
        "",
        "Tasks made by `crf-prime featdel corpus` (crf-prime): in each project below, code covered by the project's",
        "own tests was deleted; a task is solved when the hidden tests that cover it pass again. Every task was",
        "validated in a bubblewrap sandbox: the original code passes its target tests and the code policy, the",
        "snapshot fails at least one of them, and the rest of the suite still collects.",
        "",
        f"- tasks: {summary.tasks} ({', '.join(f'{k}: {v}' for k, v in summary.splits.items())}; split by project)",
        f"- packages: {summary.packages_done} used, {summary.packages_partial} used in part (time limit), "
        f"{summary.packages_failed} failed, {summary.packages_cancelled} not started or not finished",
        f"- duplicates removed: {summary.duplicates_exact} exact, {summary.duplicates_near} near (same code, other names)",
        "- files: `tasks.jsonl` (task rows), `index.jsonl` (split, licence, difficulty proxies per row), `bases/`,",
        '  `replay/`; load with the `feature-deletion` environment (`tasks = "DIR"`, `corpus_split = "train"`).',
        "",
        "## Packages",
        "",
        "| package | licence | split | tasks | suite tests | status | setup |",
        "|---|---|---|---:|---:|---|---|",
    ]
    for row in summary.packages.values():
        partial = "partial (its turn ended while others waited)" if row.reason else "partial (time limit)"
        status = {"done": "ok", "partial": partial, "cancelled": "not finished (time limit)"}.get(
            row.status, f"failed: {row.reason[:120].replace('|', '/')}"
        )
        lines.append(
            f"| {row.spec} | {row.license or 'not declared'} | {row.split or '-'} | {row.kept} | "
            f"{row.suite_tests} | {status} | {'; '.join(row.setup).replace('|', '/') or 'as shipped'} |"
        )
    lines += [
        "",
        "## Granularities",
        "",
        "| granularity | validated | rejected | yield | in corpus |",
        "|---|---:|---:|---:|---:|",
    ]
    for g, c in summary.by_granularity.items():
        checked = c["valid"] + c["rejected"]
        y = f"{100 * c['valid'] / checked:.0f}%" if checked else "-"
        lines.append(f"| {g} | {c['valid']} | {c['rejected']} | {y} | {c['kept']} |")
    if metas:
        lines += ["", "## Difficulty proxies (median over tasks)", "", "| proxy | median | max |", "|---|---:|---:|"]
        for f in ("deleted_lines", "deleted_statements", "cyclomatic", "target_tests", "callers"):
            vals = sorted(getattr(m, f) for m in metas)
            lines.append(f"| {f} | {vals[len(vals) // 2]} | {vals[-1]} |")
    lines += mutation_card(summary)
    lines += ["", "Licences are as each package's metadata declares them; check them before redistributing.", ""]
    return "\n".join(lines)


def load_split(corpus_dir: Path, split: str) -> list[FeatdelTask]:
    """The task rows of one split of a corpus directory (``index.jsonl`` says which row is where)."""

    index = corpus_dir / "index.jsonl"
    if not index.is_file():
        raise SourceError(f"{index}: not found (expected a directory written by 'crf-prime featdel corpus')")
    if split not in SPLITS:
        raise SourceError(f"split {split!r}: expected one of {', '.join(SPLITS)}")
    tasks = load_tasks(corpus_dir)
    metas = [TaskMeta.model_validate_json(x) for x in index.read_text().splitlines() if x.strip()]
    if [m.task_id for m in metas] != [t.task_id for t in tasks]:
        raise SourceError(f"{index}: does not match {corpus_dir / 'tasks.jsonl'} row for row")
    return [t for t, m in zip(tasks, metas, strict=True) if m.split == split]


def export_hf(corpus_dir: Path):
    """The corpus as a ``datasets.DatasetDict`` (``train``/``eval``), also saved to ``corpus_dir/hf``.

    Columns: the index fields (split, project, licence, granularity, difficulty proxies), the prompt, and the full
    task row as JSON (``task``), which ``FeatdelTask.model_validate_json`` reads back."""

    datasets = require("datasets", "hf")
    tasks = load_tasks(corpus_dir)
    metas = [TaskMeta.model_validate_json(x) for x in (corpus_dir / "index.jsonl").read_text().splitlines() if x]
    by_split: dict[str, list[dict]] = {s: [] for s in SPLITS}
    for t, m in zip(tasks, metas, strict=True):
        by_split[m.split].append({**m.model_dump(), "prompt": t.prompt, "task": t.model_dump_json()})
    dd = datasets.DatasetDict(
        {s: datasets.Dataset.from_list(rows) if rows else _empty(datasets, by_split) for s, rows in by_split.items()}
    )
    target = corpus_dir / "hf"
    tmp = corpus_dir / ".hf.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    dd.save_to_disk(str(tmp))
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return dd


def _empty(datasets, by_split: dict[str, list[dict]]):
    """An empty split with the same columns as the other (``Dataset.from_list([])`` would have none)."""
    sample = next((rows[0] for rows in by_split.values() if rows), None)
    if sample is None:
        return datasets.Dataset.from_dict({})
    return datasets.Dataset.from_list([sample]).select([])


__all__ = ["CorpusSummary", "PackageRow", "assemble", "dataset_card", "export_hf", "load_split", "split_projects"]
