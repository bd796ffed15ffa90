"""Feature Deletion at corpus scale: validated tasks per hour from the curated package list, on local Ray.

Runs ``crf-prime featdel corpus`` on ``configs/featdel/sources.txt`` (every package checked: the table says which
gave tasks and why the others did not) under a time limit, samples the load average while it runs (and the
machine's busy, kernel and idle CPU shares over it), and prints:
per package (status, tasks, seconds, tasks/min, tasks per granularity), per granularity (validated, rejected,
yield), rejections by reason, and the totals against the issue's bar (>= 1,000 validated tasks from >= 20 packages
within one hour). The ratio column compares, in the same run, all granularities with the function + feature
baseline (the generator's granularities before the block / tail / class ones).

    .venv/bin/python benchmarks/featdel_corpus.py [--sources configs/featdel/sources.txt] [--out out/featdel-corpus]
        [--max-tasks 60] [--time-limit-s 3600] [--resume] [--mutants-per-task 10] [--min-mutation-rate 0.95]
        [--baseline] [--no-auto-setup] [--listed-order]

With mutation testing on (the default), it also prints the grader's mutation rate per granularity and per package
(median, 5th percentile), and under each package the setup loop's actions (test dependencies installed, discovery
used, modules ignored, tests deselected; ``--no-auto-setup`` turns the loop off); ``--baseline`` first runs the same list without mutants and prints the throughput ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

from crf_prime.cli import signals_interrupt
from crf_prime.errors import NothingProduced
from crf_prime.featdel.cli import corpus
from crf_prime.featdel.corpus import CorpusConfig
from crf_prime.featdel.corpus_meta import TaskMeta
from crf_prime.featdel.granularity import GRANULARITIES, granularity_of
from crf_prime.featdel.models import GenerateSummary, VerifyConfig

ROOT = Path(__file__).resolve().parents[1]


class LoadSampler(threading.Thread):
    """``os.getloadavg()`` every ``every`` seconds while the corpus runs."""

    def __init__(self, every: float = 30.0) -> None:
        super().__init__(daemon=True)
        self.every = every
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        t0 = time.monotonic()
        while not self.stop.is_set():
            self.samples.append((round(time.monotonic() - t0), os.getloadavg()[0]))
            self.stop.wait(self.every)


def cpu_ticks() -> list[int] | None:
    """The machine's CPU time so far by kind (``/proc/stat``'s first line: user nice system idle iowait irq softirq
    steal); None where there is none."""
    try:
        with open("/proc/stat") as fh:
            return [int(x) for x in fh.readline().split()[1:9]]
    except (OSError, ValueError):
        return None


def cpu_shares(before: list[int] | None, after: list[int] | None) -> dict[str, float] | None:
    """Shares (%) of the machine's CPU time between two :func:`cpu_ticks` readings: busy (user, nice and the
    kernel's), the kernel's own (system, irq, softirq) and idle (idle, iowait). Whether the run left cores
    unused, and how much of the work is the kernel's (forks, sandboxes, trees of hard links)."""
    if before is None or after is None:
        return None
    d = [b - a for a, b in zip(before, after, strict=True)]
    total = sum(d) or 1
    idle = d[3] + d[4]
    return {
        "busy": round(100 * (total - idle - d[7]) / total, 1),
        "kernel": round(100 * (d[2] + d[5] + d[6]) / total, 1),
        "idle": round(100 * idle / total, 1),
    }


def time_split(out: Path) -> dict[str, float]:
    """Package-seconds by stage, summed over the packages that ran: ``setup`` (download, setup loop: collection,
    plugin installs, the suite once or twice), then ``featdel generate``'s own stages (``source``, ``venv``,
    ``coverage``: the coverage baseline, ``grade``: grading gold and the deletion, ``record``: the replay recording,
    ``verify``: mutation testing, ``validate``: the rest of validation), and ``refused`` (packages that failed: all
    their time). Cancelled packages record no time."""
    summary = json.loads((out / "summary.json").read_text())
    split: Counter[str] = Counter()
    stages = ("grade", "record", "verify")  # inside generate's "validate"
    for slug, row in summary["packages"].items():
        gen = out / "packages" / slug / "tasks" / "summary.json"
        if row["status"] not in ("done", "partial") or not gen.is_file():
            split["refused"] += row["seconds"]
            continue
        secs = GenerateSummary.model_validate_json(gen.read_text()).seconds
        split["setup"] += max(0.0, row["seconds"] - secs.get("total", 0.0))
        for stage in ("source", "venv", "coverage", *stages):
            split[stage] += secs.get(stage, 0.0)
        split["validate"] += secs.get("validate", 0.0) - sum(secs.get(s, 0.0) for s in stages)
    return {k: round(v, 1) for k, v in split.items()}


def report(
    out: Path, wall_s: float, loads: list[tuple[float, float]], started: float = 0.0, cpu: dict | None = None
) -> dict:
    """Print the tables; ``started`` (epoch seconds): packages finished before it were resumed, and their tasks do
    not count towards this run's rate."""
    summary = json.loads((out / "summary.json").read_text())
    metas = [TaskMeta.model_validate_json(x) for x in (out / "index.jsonl").read_text().splitlines() if x]
    lines = []
    per_pkg: dict[str, Counter[str]] = defaultdict(Counter)
    for slug in summary["packages"]:
        path = out / "packages" / slug / "meta.jsonl"
        for x in path.read_text().splitlines() if path.is_file() else []:
            per_pkg[slug][TaskMeta.model_validate_json(x).granularity] += 1
    rejected_by: dict[str, Counter[str]] = defaultdict(Counter)
    for slug in summary["packages"]:
        s = out / "packages" / slug / "tasks" / "summary.json"
        if s.is_file():
            for r in GenerateSummary.model_validate_json(s.read_text()).rejections:
                rejected_by[granularity_of(r.candidate)][r.reason] += 1

    lines.append(f"{'package':<34} {'status':<9} {'tasks':>5} {'kept':>5} {'secs':>6} {'/min':>6}  by granularity")
    for slug, row in summary["packages"].items():
        rate = 60 * row["tasks"] / row["seconds"] if row["seconds"] and row["tasks"] else 0.0
        grans = " ".join(f"{g}={per_pkg[slug][g]}" for g in GRANULARITIES if per_pkg[slug][g])
        lines.append(
            f"{row['spec'].removeprefix('pypi:'):<34} {row['status']:<9} {row['tasks']:>5} {row['kept']:>5} "
            f"{row['seconds']:>6.0f} {rate:>6.1f}  {grans}"
        )
        if row.get("turns", 1) > 1:
            lines.append(f"{'':<36}in {row['turns']} turns (its first ended while others waited)")
        for action in row.get("setup", []):
            lines.append(f"{'':<36}setup: {action}")
        if row["status"] == "partial" and row.get("reason"):
            lines.append(f"{'':<36}{row['reason']}")
    lines.append("")
    lines.append(f"{'granularity':<12} {'valid':>6} {'rejected':>8} {'yield':>6} {'kept':>6}  rejections by reason")
    for g, c in summary["by_granularity"].items():
        checked = c["valid"] + c["rejected"]
        y = f"{100 * c['valid'] / checked:.0f}%" if checked else "-"
        why = ", ".join(f"{k}={v}" for k, v in sorted(rejected_by[g].items()))
        lines.append(f"{g:<12} {c['valid']:>6} {c['rejected']:>8} {y:>6} {c['kept']:>6}  {why}")
    lines.append("")
    failed = {slug: r for slug, r in summary["packages"].items() if r["status"] not in ("done", "partial")}
    for slug, r in failed.items():
        lines.append(f"not used: {slug}: {r['status']}: {r['reason'][:240]}")

    valid = sum(c["valid"] for c in summary["by_granularity"].values())
    resumed = sum(
        row["tasks"]
        for slug, row in summary["packages"].items()
        if (out / "packages" / slug / "status.json").is_file()
        and (out / "packages" / slug / "status.json").stat().st_mtime < started
    )
    base = sum(summary["by_granularity"][g]["valid"] for g in ("function", "feature"))
    with_tasks = sum(1 for r in summary["packages"].values() if r["kept"] > 0)
    load_values = [v for _, v in loads]
    result = {
        "wall_s": round(wall_s, 1),
        "validated": valid,
        "kept": summary["tasks"],
        "duplicates_removed": summary["duplicates_exact"] + summary["duplicates_near"],
        "packages_listed": len(summary["packages"]),
        "packages_with_tasks": with_tasks,
        "yield": round(with_tasks / len(summary["packages"]), 3) if summary["packages"] else 0.0,
        "setup": {slug: r.get("setup", []) for slug, r in summary["packages"].items()},
        "packages_failed": summary["packages_failed"],
        "packages_partial": summary.get("packages_partial", 0),
        "packages_cancelled": summary.get("packages_cancelled", 0),
        "resumed_tasks": resumed,
        "tasks_per_min": round(60 * (valid - resumed) / wall_s, 2),
        "kept_per_min": round(60 * summary["tasks"] / wall_s, 2),
        "function_feature_baseline": base,
        "ratio_all_vs_baseline": round(valid / base, 2) if base else None,
        "splits": summary["splits"],
        "rejected": summary["rejected"],
        "load_avg_1m": {
            "samples": len(load_values),
            "min": min(load_values, default=0),
            "mean": round(sum(load_values) / len(load_values), 2) if load_values else 0,
            "max": max(load_values, default=0),
        },
        "cpu_percent": cpu,
        "difficulty_median": {
            f: sorted(getattr(m, f) for m in metas)[len(metas) // 2] if metas else 0
            for f in ("deleted_lines", "deleted_statements", "cyclomatic", "target_tests", "callers")
        },
    }
    lines.append("")
    lines.append(
        f"validated {valid} tasks ({summary['tasks']} after duplicate removal) from {with_tasks} packages in "
        f"{wall_s / 60:.1f} min (yield {with_tasks}/{len(summary['packages'])} packages; {resumed} of them resumed from an earlier run): {result['tasks_per_min']} "
        "tasks/min made in this run; all granularities / function+feature = "
        f"{result['ratio_all_vs_baseline']}x; load average (1 min) mean {result['load_avg_1m']['mean']} "
        f"max {result['load_avg_1m']['max']} over {len(load_values)} samples on {os.cpu_count()} cores"
        + (f"; CPU busy {cpu['busy']} % (kernel {cpu['kernel']} %), idle {cpu['idle']} %" if cpu else "")
    )
    split = time_split(out)
    result["package_seconds_by_stage"] = split
    lines.append(
        "package-seconds by stage: "
        + ", ".join(f"{k} {v:.0f}" for k, v in sorted(split.items(), key=lambda kv: -kv[1]))
    )
    bar = valid >= 1000 and with_tasks >= 20 and wall_s <= 3600 and not resumed
    lines.append(f"issue bar (>= 1000 tasks from >= 20 packages within 60 min): {'MET' if bar else 'NOT MET'}")
    reach = len(summary["packages"]) >= 20 and result["yield"] >= 0.75 and result["tasks_per_min"] >= 16.7
    lines.append(
        f"reach bar (>= 20 packages listed, >= 75% with tasks, >= 16.7 validated tasks/min): {'MET' if reach else 'NOT MET'}"
        " (yield and rate meaningful only for a list chosen by benchmarks/featdel_reach_pick.py, run cold)"
    )
    mutation = summary.get("mutation")
    if mutation:
        from crf_prime.featdel.models import RateStats

        lines.append("")
        lines.append(f"grader's mutation rate over the kept tasks: {RateStats(**mutation).line()}")
        for g, st in summary["mutation_by_granularity"].items():
            lines.append(f"  {g:<10} {RateStats(**st).line()}")
        for slug, st in summary["mutation_by_package"].items():
            lines.append(f"  {summary['packages'][slug]['spec'].removeprefix('pypi:'):<34} {RateStats(**st).line()}")
        result["mutation"] = mutation
    print("\n".join(lines), flush=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sources", type=Path, default=ROOT / "configs" / "featdel" / "sources.txt")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "featdel-corpus")
    ap.add_argument("--max-tasks", type=int, default=60)
    ap.add_argument("--time-limit-s", type=float, default=3600.0)
    ap.add_argument("--num-cpus", type=int, default=None)
    ap.add_argument("--resume", action="store_true", help="keep the packages an earlier run finished")
    ap.add_argument(
        "--no-auto-setup", action="store_true", help="no setup loop: each suite must pass with its line's own flags"
    )
    ap.add_argument(
        "--listed-order",
        action="store_true",
        help="start the packages in the list's order (the curated list is ordered fastest first), not smallest first",
    )
    ap.add_argument(
        "--turn-s",
        type=float,
        default=CorpusConfig.model_fields["turn_s"].default,
        help="see CorpusConfig.turn_s (0: each package in one go)",
    )
    ap.add_argument("--mutants-per-task", type=int, default=VerifyConfig().mutants_per_task)
    ap.add_argument("--min-mutation-rate", type=float, default=VerifyConfig().min_mutation_rate)
    ap.add_argument(
        "--baseline",
        action="store_true",
        help="first run the same list without mutants (--mutants-per-task 0) into OUT-baseline and print the ratio",
    )
    args = ap.parse_args()
    baseline = None
    if args.baseline:
        print("baseline: the same run without mutation testing", flush=True)
        baseline = run(args, args.out.with_name(args.out.name + "-baseline"), mutants=0)
        print("\nwith mutation testing", flush=True)
    result = run(args, args.out, mutants=args.mutants_per_task)
    if baseline is not None:
        print(
            f"\nvalidated tasks/min: {result['tasks_per_min']} with {args.mutants_per_task} mutants per task, "
            f"{baseline['tasks_per_min']} without (same list, same machine, run just before): "
            f"{result['tasks_per_min'] / baseline['tasks_per_min']:.2f}x"
            if baseline["tasks_per_min"]
            else "baseline made no task"
        )


def run(args: argparse.Namespace, out: Path, *, mutants: int) -> dict:
    """One corpus run into ``out`` and its report."""
    if out.exists() and not args.resume:
        shutil.rmtree(out)
    sampler = LoadSampler()
    sampler.start()
    t0, started, ticks = time.perf_counter(), time.time(), cpu_ticks()
    try:
        with signals_interrupt(), contextlib.suppress(NothingProduced):  # SIGTERM unwinds like Ctrl-C; a run
            # that made no task still gets its table (why each package gave none)
            corpus(
                CorpusConfig(
                    sources=args.sources,
                    out=out,
                    max_tasks=args.max_tasks,
                    time_limit_s=args.time_limit_s,
                    num_cpus=args.num_cpus,
                    mutants_per_task=mutants,
                    min_mutation_rate=args.min_mutation_rate,
                    auto_setup=not args.no_auto_setup,
                    smallest_first=not args.listed_order,
                    turn_s=args.turn_s,
                )
            )
    finally:
        sampler.stop.set()
    wall = time.perf_counter() - t0
    result = report(out, wall, sampler.samples, started, cpu_shares(ticks, cpu_ticks()))
    (out / "benchmark.json").write_text(json.dumps({"samples": sampler.samples, **result}, indent=2) + "\n")
    return result


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # SIGINT / SIGTERM: the corpus cleaned up after itself
        print("featdel corpus benchmark: interrupted", file=sys.stderr)
        sys.exit(130)
