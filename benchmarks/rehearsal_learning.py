"""Does the CPU rehearsal learn? The learning table of prime-rl's loop with the sampling policy, per objective.

Runs the rehearsal's learning arms (scripts/rehearse/rehearse.py ``--arms learn``: prime-rl's orchestrator and env
servers, the inference stand-in sampling from the tiny model, the trainer stand-in with prime-rl's loss; the echo
taskset; prime-rl's default loss and each objective of loss_fns.policy), then prints per arm:

- mean train reward of step 1 (rollouts of the starting weights v0) and of the last 3 steps, each with a percentile
  bootstrap CI over tasks (``crf_prime.report.stats.bootstrap_mean``, what ``crf-prime report`` uses), and whether the
  intervals are separated (the last steps' low bound above step 1's high bound);
- the eval pass (64 strings of another seed, at the train temperature; two-digit strings, all 100 of which are in the
  train set, so not held out): v0 vs the last eval, the paired per-task difference and its bootstrap CI;
- off-policy figures over the run: the largest mismatch KL, clip fraction and masked fraction of a step, the ratio
  range; and the spread of the six objectives' losses on one batch (trainer stand-in ``--compare-objectives``).

Writes ``<work>/learning/learning.json``, ``learning.png`` (train reward per step, one curve per arm) and the
``crf-prime report`` of the eval pass (``<work>/learning/report/``). Run with the rehearsal venv's Python:

    ~/.cache/crf-prime/rehearsal-venv/bin/python benchmarks/rehearsal_learning.py
    ... --analyse-only   # re-read an earlier run's <work>
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from crf_prime.report.load import read_traces
from crf_prime.report.stats import bootstrap_mean

REPO = Path(__file__).resolve().parents[1]
LAST = 3
"""Steps pooled as the end of training."""
STEPS = 12
"""Training steps per arm: in two 15-step runs of the six arms (round 9), the last 3 of the first 12 steps lay above
step 1's bootstrap CI for every arm (margins 0.03-0.19); at 10 steps one arm's did not."""


def per_task(path: Path) -> dict[str, float]:
    """Mean reward per task of one traces.jsonl (a group's rollouts share a task)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for s in read_traces(path)[0]:
        groups[s.task].append(s.reward)
    return {t: sum(v) / len(v) for t, v in groups.items()}


def _steps(run_dir: Path, kind: str) -> dict[int, Path]:
    out = {}
    for d in (run_dir / "rollouts").glob("step_*"):
        path = d / kind / "all" / "traces.jsonl"
        if path.is_file():
            out[int(d.name.removeprefix("step_"))] = path
    return dict(sorted(out.items()))


def _fmt(e) -> str:
    return f"{e.value:.3f} [{e.low:.3f}, {e.high:.3f}]"


def analyse_arm(run_dir: Path) -> dict | None:
    """The learning row of one arm's run directory (None: fewer than LAST + 1 steps with rollouts)."""
    # only batches the trainer trained on: the orchestrator runs a step ahead and may write one more before it stops
    trained = run_dir / "rehearsal"
    train = {s: p for s, p in _steps(run_dir, "train").items() if (trained / f"trainer_step_{s}.json").is_file()}
    if len(train) < LAST + 1:
        print(f"{run_dir}: {len(train)} train steps with rollouts; need at least {LAST + 1}")
        return None
    curve = {s: sum(v := list(per_task(p).values())) / len(v) for s, p in train.items()}
    first = bootstrap_mean(list(per_task(train[min(train)]).values()))
    pooled: list[float] = []
    for s in list(train)[-LAST:]:
        pooled += per_task(train[s]).values()
    last = bootstrap_mean(pooled)
    row = {"curve": curve, "first": first, "last": last, "separated": last.low > first.high}
    evals = _steps(run_dir, "eval")
    common: list[str] = []
    if len(evals) >= 2:
        v0, end = per_task(evals[min(evals)]), per_task(evals[max(evals)])
        common = sorted(v0.keys() & end.keys())
    if len(evals) >= 2 and common:  # an eval whose episodes all failed scores no task
        row["eval"] = {
            "steps": [min(evals), max(evals)],
            "v0": sum(v0[t] for t in common) / len(common),
            "end": sum(end[t] for t in common) / len(common),
            "diff": bootstrap_mean([end[t] - v0[t] for t in common]),
        }
    trainer = [json.loads(p.read_text()) for p in sorted((run_dir / "rehearsal").glob("trainer_step_*.json"))]
    off = [t.get("off_policy") or {} for t in trainer]
    row["off_policy"] = {
        "mismatch_kl_max": max((o.get("mismatch_kl", 0.0) for o in off), default=0.0),
        "clip_frac_max": max((o.get("clip_frac", 0.0) for o in off), default=0.0),
        "masked_frac_max": max((o.get("masked_frac", 0.0) for o in off), default=0.0),
        "ratio_min": min((o.get("ratio_min", 1.0) for o in off), default=1.0),
        "ratio_max": max((o.get("ratio_max", 1.0) for o in off), default=1.0),
    }
    distinct = [len({round(v, 6) for v in (t.get("objective_losses") or {}).values()}) for t in trainer]
    row["objective_losses_distinct_max"] = max(distinct, default=0)
    return row


_LOOP_START = re.compile(r"(\d\d:\d\d:\d\d)\W+INFO\W+Starting orchestrator loop")


def _loop_start(run_dir: Path, started_at: float) -> float | None:
    """Epoch seconds at which the arm's orchestrator started its loop (its log's "Starting orchestrator loop", a
    UTC clock time, placed on the day the arm started)."""
    log = run_dir / "rehearsal-logs" / "orchestrator.log"
    text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace")) if log.is_file() else ""
    found = _LOOP_START.search(text)
    if found is None or not started_at:
        return None
    h, m, sec = map(int, found.group(1).split(":"))
    day = started_at - started_at % 86400
    t = day + h * 3600 + m * 60 + sec
    return t + 86400 if t < started_at - 3600 else t


def timing(work: Path, arms: list[str]) -> dict | None:
    """Where the wall time went, from <work>/report.json (rehearse.py: compose seconds, start time and CPU seconds by
    role per arm) and the run directories: compose (all arms, one after the other), start-up (processes started →
    the orchestrator's loop starts: imports, env servers and inference stand-in ready), steps (loop start → the
    trainer's last step written), per arm; CPU seconds by role over the whole run."""
    path = work / "report.json"
    if not path.is_file():
        return None
    reports = {r["arm"]: r for r in json.loads(path.read_text())["arms"] if r["arm"] in arms}
    per_arm, cpu = {}, {}
    for arm, r in reports.items():
        run_dir = work / "outputs" / f"rehearsal-{arm}"
        started = r.get("started_at") or 0.0
        loop = _loop_start(run_dir, started)
        steps = sorted((run_dir / "rehearsal").glob("trainer_step_*.json"), key=lambda p: p.stat().st_mtime)
        last = steps[-1].stat().st_mtime if steps else None
        per_arm[arm] = {
            "compose_s": r.get("compose_s"),
            "startup_s": round(loop - started, 1) if loop else None,
            "steps_s": round(last - loop, 1) if loop and last else None,
            "steps": len(steps),
            "wall_s": r.get("wall_s"),
        }
        for role, v in (r.get("cpu_s") or {}).items():
            cpu[role] = cpu.get(role, 0.0) + v
    shared = next((r["shared_cpu_s"] for r in reports.values() if r.get("shared_cpu_s")), {})
    for role, v in shared.items():
        cpu[role] = cpu.get(role, 0.0) + v
    return {"per_arm": per_arm, "cpu_s": {k: round(v, 1) for k, v in sorted(cpu.items())}}


def print_timing(t: dict) -> None:
    print("\nwhere the wall time went (s): arm | compose | start-up (to the orchestrator's loop) | steps | wall")
    for arm, a in t["per_arm"].items():
        print(f"{arm} | {a['compose_s']} | {a['startup_s']} | {a['steps_s']} ({a['steps']} steps) | {a['wall_s']}")
    total = sum(t["cpu_s"].values())
    if total:
        cells = ", ".join(f"{k} {v:.0f} ({v / total:.0%})" for k, v in t["cpu_s"].items())
        print(f"CPU seconds by role (all arms, read as each process ended): {total:.0f} = {cells}")


def plot(rows: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for arm, row in rows.items():
        steps = list(row["curve"])
        ax.plot(steps, [row["curve"][s] for s in steps], marker=".", label=arm)
    ax.set_xlabel("step (rollouts of that step's batch)")
    ax.set_ylabel("mean train reward (echo similarity)")
    ax.set_title("CPU rehearsal: prime-rl loop, sampling tiny model, echo taskset")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def crf_report(work: Path, arms: list[str], out: Path) -> str:
    """`crf-prime report` over the eval pass: v0 (step-0 eval of the first arm) vs each arm's last eval."""
    first = _steps(work / "outputs" / f"rehearsal-{arms[0]}", "eval")
    if not first:
        return f"no eval rollouts in {work / 'outputs' / f'rehearsal-{arms[0]}'}"
    runs = [f"v0={first[min(first)]}"] + [f"{a}={work / 'outputs' / f'rehearsal-{a}'}" for a in arms]
    cmd = [str(Path(sys.executable).parent / "crf-prime"), "report", "--out", str(out), "--threshold", "1.0"]
    cmd += ["--runs", *runs]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return (proc.stdout + proc.stderr).strip() + f"\n(exit {proc.returncode}: {' '.join(cmd)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_work = Path.home() / ".cache/crf-prime/rehearsal-learn"
    parser.add_argument("--work", type=Path, default=default_work)
    parser.add_argument(
        "--steps", type=int, default=STEPS, help="training steps per arm (the last LAST are pooled as the end)"
    )
    parser.add_argument("--arms", nargs="+", default=None, help="learning arms (default: all)")
    parser.add_argument("--analyse-only", action="store_true", help="only read an earlier run in --work")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per arm (rehearse.py --timeout)")
    parser.add_argument("--png", type=Path, default=None, help="also copy the PNG here (docs/rehearsal-learning.png)")
    parser.add_argument(
        "--rl-arg", action="append", default=[], metavar="ARG", help="passed to rehearse.py --rl-arg (repeatable)"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "scripts" / "rehearse"))
    from rehearse import LEARN_ARMS

    arms = args.arms or LEARN_ARMS
    wall = cpu = None
    if not args.analyse_only:
        t0 = time.monotonic()
        cmd = [sys.executable, str(REPO / "scripts/rehearse/rehearse.py"), "--work", str(args.work), "--arms", *arms]
        cmd += ["--steps", str(args.steps), "--timeout", str(args.timeout), *(f"--rl-arg={a}" for a in args.rl_arg)]
        proc = subprocess.run(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        wall = time.monotonic() - t0
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = usage.ru_utime + usage.ru_stime
        print(f"rehearsal exit {proc.returncode}, wall {wall:.0f} s for {len(arms)} arms of {args.steps} steps")
        print(f"CPU time of the processes reaped through rehearse.py: {cpu:.0f} s (a lower bound: env-server workers")
        print("  stopped with their server are not reaped here; 'CPU seconds by role' below counts every process)")
        print(f"load average at the end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    analysed = {a: analyse_arm(args.work / "outputs" / f"rehearsal-{a}") for a in arms}
    rows = {a: row for a, row in analysed.items() if row is not None}
    if not rows:
        return 1
    out = args.work / "learning"
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"\nlearning table ({args.work}): train reward, bootstrap 95% CI over tasks; eval: another seed, train temperature"
    )
    head = ["arm", "step 1", f"last {LAST} steps", "separated", "eval v0 → end (Δ, paired CI)"]
    head += ["max mismatch KL", "max clip frac", "max masked frac", "ratio range", "distinct objective losses"]
    print(" | ".join(head))
    for arm, row in rows.items():
        ev = row.get("eval")
        ev_cell = (
            f"{ev['v0']:.3f} → {ev['end']:.3f} (Δ {_fmt(ev['diff'])}, steps {ev['steps'][0]}→{ev['steps'][1]})"
            if ev
            else "-"
        )
        o = row["off_policy"]
        cells = [arm, _fmt(row["first"]), _fmt(row["last"]), "yes" if row["separated"] else "NO", ev_cell]
        cells += [f"{o['mismatch_kl_max']:.4f}", f"{o['clip_frac_max']:.3f}", f"{o['masked_frac_max']:.3f}"]
        cells += [f"{o['ratio_min']:.3f}–{o['ratio_max']:.3f}", f"{row['objective_losses_distinct_max']}/6"]
        print(" | ".join(cells))
    times = timing(args.work, list(rows))
    if times is not None:
        print_timing(times)
    plot(rows, out / "learning.png")
    print(f"PNG: {out / 'learning.png'}")
    if args.png is not None:
        shutil.copyfile(out / "learning.png", args.png)
        print(f"PNG copied to {args.png}")
    report_text = crf_report(args.work, list(rows), out / "report")
    print(f"\ncrf-prime report over the eval pass (pass = exact echo):\n{report_text}")

    def plain(e) -> dict:
        return {"value": e.value, "low": e.low, "high": e.high, "n": e.n}

    dump = {
        arm: {
            **row,
            "first": plain(row["first"]),
            "last": plain(row["last"]),
            **({"eval": {**row["eval"], "diff": plain(row["eval"]["diff"])}} if "eval" in row else {}),
        }
        for arm, row in rows.items()
    }
    record = {"wall_s": wall, "cpu_s": cpu, "timing": times, "arms": dump}
    (out / "learning.json").write_text(json.dumps(record, indent=1))
    return 0 if len(rows) == len(arms) and all(r["separated"] for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
