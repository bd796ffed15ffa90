"""The rehearsal's checks and table, read from what prime-rl wrote (the orchestrator's file monitor:
``rollouts/step_N/train/effective/traces.jsonl`` = the episodes of step N's training batch) and what the trainer
stand-in wrote (``rehearsal/trainer_step_N.json``).

Checks per arm and step: every source has rollouts in the batch; each Feature Deletion reward equals what our grader
(``crf_prime.featdel.grade.grade_changes``) gives the same workspace, rebuilt here from the episode's edit calls;
loss and loss metrics are finite; the step ran. A2: hint-source samples carry reference logprobs that differ from the
sampling logprobs (computed with the hint); reported, not asserted (issue 12 measures them): the share of
hint-distilled samples, the fraction of distilled tokens inside error turns, distilled samples with an empty hint.
A3: replay rewards. swebench-lite (the mini fixture): each reward is 1 exactly when the workspace rebuilt from the
episode's edit calls equals the base commit with the gold patch applied (the scripted policy applies it or changes
nothing), so the graded hidden tests decide as they must. After the arm: no process of the run (sandboxes included) is left.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from weights import weights_digest

from crf_prime.check.mix import distilled_share

_GRADES: dict[str, float] = {}
PLANTED_AS: dict[str, set[str]] = {
    "traceback": {"traceback"},
    "unknown_tool": {"unknown_tool"},
    "bad_json": {"invalid_json"},
    "wrong_impl": {"failing_test"},
    "failing_command": {"tool_error"},
}
"""Error the scripted policy planted -> the detector kinds (crf_prime.hints) that rightly report it (the detector reports
a command that raises as a traceback, not also as a tool error). Any episode scored below 1 also has failing tests."""
KINDS = ("traceback", "unknown_tool", "invalid_json", "failing_test", "tool_error")


def _planted(trace: dict, completions: dict[tuple[int, ...], str | None]) -> set[str]:
    """Detector kinds the episode should show, from the policy's log of its own completions."""
    kinds = set()
    for node in trace["nodes"]:
        if node.get("message", {}).get("role") != "assistant":
            continue
        ids = tuple(node.get("token_ids") or ())
        # a node's tokens are the rendered turn: the role header, then exactly the sampled completion
        error = next((completions[ids[k:]] for k in range(min(len(ids), 32)) if ids[k:] in completions), None)
        if error:
            kinds |= PLANTED_AS[error]
    if _reward(trace) < 1.0:
        kinds.add("failing_test")
    return kinds


def _completions(run_dir: Path) -> dict[tuple[int, ...], str | None]:
    path = run_dir / "rehearsal-logs" / "completions.jsonl"
    table: dict[tuple[int, ...], str | None] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        rec = json.loads(line)
        if "completion_ids" in rec:
            table[tuple(rec["completion_ids"])] = rec["error"]
    return table


def detector_scores(run_dir: Path, steps: int) -> dict[str, dict[str, int]]:
    """Per kind: episodes where the detector's sites (trace.info["hint_sites"]) match what the policy planted."""
    completions = _completions(run_dir)
    scores: dict[str, dict[str, int]] = {k: {"tp": 0, "fp": 0, "fn": 0} for k in KINDS}
    seen: set[str] = set()
    for step in range(1, steps + 1):
        path = run_dir / "rollouts" / f"step_{step}" / "train" / "all" / "traces.jsonl"
        for line in path.read_text().splitlines() if path.exists() else []:
            episode = json.loads(line)
            if episode["env"]["id"] != "feature-deletion":
                continue
            for trace in episode["traces"]:
                if trace["id"] in seen or not trace.get("ok"):
                    continue
                seen.add(trace["id"])
                planted = _planted(trace, completions)
                found = {site["kind"] for site in (trace.get("info") or {}).get("hint_sites") or []}
                for kind, score in scores.items():
                    if kind in planted and kind in found:
                        score["tp"] += 1
                    elif kind in found:
                        score["fp"] += 1
                    elif kind in planted:
                        score["fn"] += 1
    return scores


def _episodes(run_dir: Path, step: int, which: str = "effective") -> list[dict]:
    """Episodes of step N: ``effective`` = those of its training batch, ``all`` = every episode finished for it."""
    path = run_dir / "rollouts" / f"step_{step}" / "train" / which / "traces.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def finished(run_dir: Path, step: int, hint_sources: list[str]) -> dict:
    """Rollouts finished for step N per source, and the hint rollouts among them that kept error turns to distil."""
    per_source: dict[str, int] = {}
    with_site = 0
    for episode in _episodes(run_dir, step, "all"):
        for trace in episode["traces"]:
            source = episode["env"]["name"]
            per_source[source] = per_source.get(source, 0) + 1
            if source in hint_sources:
                with_site += bool((trace.get("info") or {}).get("hint_turns"))
    return {"rollouts": per_source, "hint_with_error_site": with_site}


def configured_share(orch: dict) -> float:
    """The opsd sources' share of rollouts the composed config sets (ratio·group_size normalised, crf-prime check)."""
    from crf_prime.check.mix import channel_mix

    default_group = orch.get("group_size") or 1
    mix = channel_mix(
        [
            (s["name"], s["algo"]["type"], float(s.get("ratio", 1.0)), int(s.get("group_size") or default_group))
            for s in orch["train"]["source"]
        ]
    )
    return sum(s.share for s in mix if s.algo == "opsd")


def _reward(trace: dict) -> float:
    return sum(r["score"] * r.get("weight", 1.0) for r in trace.get("rewards", {}).values())


def _rebuilt_changes(row, trace: dict) -> dict[str, str | None]:
    """The agent's workspace edits, replayed from its successful ``edit`` calls (the scripted policy's bash commands
    do not write files)."""
    return _replay_edits(dict(row.broken_files), trace)


def _replay_edits(files: dict[str, str], trace: dict) -> dict[str, str]:
    """``files`` after the episode's successful ``edit`` calls; only the files that changed."""
    start = dict(files)
    nodes = [n["message"] for n in trace["nodes"] if "message" in n]
    results = {m.get("tool_call_id"): m.get("content") or "" for m in nodes if m.get("role") == "tool"}
    for m in nodes:
        for call in m.get("tool_calls") or []:
            if call["name"] != "edit" or not str(results.get(call["id"], "")).startswith(("edited", "wrote")):
                continue
            args = json.loads(call["arguments"])
            path, old, new = args["path"], args["old_str"], args["new_str"]
            text = files.get(path)
            if text is None:
                from pathlib import PurePosixPath

                raise ValueError(f"edit outside the snapshot's files: {PurePosixPath(path)}")
            files[path] = new if old == "" else text.replace(old, new, 1)
    return {p: t for p, t in files.items() if t != start[p]}


def swe_expected(instance: dict, repos_dir: Path, trace: dict) -> float:
    """1.0 when the episode's edits turn the base commit into the gold patch's tree (over the files the gold patch
    touches), else 0.0: what the graded hidden tests must say of the scripted policy's two outcomes."""
    import subprocess

    from crf_prime.featdel.deletion import apply_unified_diff

    mirror = repos_dir / instance["repo"].replace("/", "__")
    paths = [line[6:].strip() for line in instance["patch"].splitlines() if line.startswith("+++ b/")]
    base = {
        p: subprocess.run(
            ["git", "-C", str(mirror), "show", f"{instance['base_commit']}:{p}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        for p in paths
    }
    gold = apply_unified_diff(base, instance["patch"])
    edited = {**base, **_replay_edits(base, trace)}
    return 1.0 if edited == gold else 0.0


def _regrade(rows: dict, task_dir: Path, trace: dict) -> float:
    from crf_prime.featdel.grader import grade_changes
    from crf_prime.placement import GradingSandbox
    from crf_prime.sandbox import Sandbox

    row = rows[trace["task"]["data"]["name"]]
    changes = _rebuilt_changes(row, trace)
    key = hashlib.sha256(json.dumps([row.task_id, sorted(changes.items())]).encode()).hexdigest()
    if key not in _GRADES:
        _GRADES[key] = grade_changes(
            row, task_dir, changes, sandbox=Sandbox(GradingSandbox.model_validate({"limits": {"wall_seconds": 120}}))
        ).score
    return _GRADES[key]


def arm_report(run_dir: Path, steps: int, sources: list[str], hint_sources: list[str], inputs: dict[str, Path]) -> dict:
    from crf_prime.featdel.models import FeatdelTask

    tasks = inputs.get("tasks")
    swe_path = inputs.get("swe_instances")
    swe_rows = {}
    for line in swe_path.read_text().splitlines() if swe_path else []:
        instance = json.loads(line)
        swe_rows[instance["instance_id"]] = instance
    rows = {}
    for line in tasks.read_text().splitlines() if tasks else []:
        row = FeatdelTask.model_validate_json(line)
        rows[row.task_id] = row
    out = []
    for step in range(1, steps + 1):
        f = run_dir / "rehearsal" / f"trainer_step_{step}.json"
        trainer = json.loads(f.read_text()) if f.exists() else None
        per_source: dict[str, dict] = {}
        regrade = {"checked": 0, "equal": 0, "mismatches": []}
        hints = {"samples": 0, "empty": 0, "site_kinds": {}}
        for episode in _episodes(run_dir, step):
            for trace in episode["traces"]:
                source = episode["env"]["name"]
                src = per_source.setdefault(source, {"rollouts": 0, "rewards": []})
                src["rollouts"] += 1
                src["rewards"].append(round(_reward(trace), 4))
                if episode["env"]["id"] == "feature-deletion":
                    regrade["checked"] += 1
                    again = _regrade(rows, tasks.parent, trace)
                    if abs(again - _reward(trace)) < 1e-9:
                        regrade["equal"] += 1
                    else:
                        regrade["mismatches"].append(
                            {"episode": episode["id"], "reward": _reward(trace), "grader": again}
                        )
                if episode["env"]["id"] == "swebench-lite":
                    regrade["checked"] += 1
                    instance = swe_rows[trace["task"]["data"]["instance"]["instance_id"]]
                    again = swe_expected(instance, swe_path.parent / "repos", trace)
                    if abs(again - _reward(trace)) < 1e-9:
                        regrade["equal"] += 1
                    else:
                        regrade["mismatches"].append(
                            {"episode": episode["id"], "reward": _reward(trace), "gold": again}
                        )
                if source in hint_sources:
                    hints["samples"] += 1
                    hints["empty"] += int(not (trace.get("info") or {}).get("hint"))
                    for site in (trace.get("info") or {}).get("hint_sites") or []:
                        hints["site_kinds"][site["kind"]] = hints["site_kinds"].get(site["kind"], 0) + 1
        out.append(
            {
                "step": step,
                "sources": per_source,
                "finished": finished(run_dir, step, hint_sources),
                "regrade": regrade,
                "hints": hints,
                "trainer": trainer,
            }
        )
    scoring = [json.loads(x) for x in (run_dir / "rehearsal-logs" / "completions.jsonl").read_text().splitlines()]
    scoring = [r for r in scoring if r.get("score")]
    orch = json.loads((run_dir / "configs" / "orchestrator.json").read_text())
    prefixes = tuple(
        src["algo"]["template"].split("{demonstration}")[0]
        for src in orch["train"]["source"]
        if src["name"] in hint_sources
    )
    return {
        "scoring_calls": len(scoring),
        "scoring_calls_with_hint_block": sum(
            bool(prefixes) and r["system_head"].removeprefix("<|im_start|>system\n").startswith(prefixes)
            for r in scoring
        ),
        "steps": out,
        "sources": sources,
        "hint_sources": hint_sources,
        "configured_hint_share": configured_share(orch) if hint_sources else 0.0,
        "batch_size": orch.get("batch_size") or 0,
        "detector": detector_scores(run_dir, steps),
    }


def relay_report(run_dir: Path, node: Path) -> dict:
    """The relayed arm: each weight update the inference stand-in loaded (path, digest) against the trainer's step,
    the steps the node holds (its own copies: other inodes), and how long the gate held updates for the relay."""
    import re

    log = run_dir / "rehearsal-logs" / "completions.jsonl"
    updates = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    updates = [u for u in updates if "update" in u]
    broadcasts = run_dir / "broadcasts"
    rows = []
    for u in updates:
        step = Path(u["update"]).name
        trainer_step = broadcasts / step
        rows.append(
            {"step": step, "equal": u["sha256"] == weights_digest(trainer_step) if trainer_step.is_dir() else None}
        )
    node_steps = sorted(p.name for p in node.glob("step_*") if (p / "STABLE").exists())
    separate = all(
        (node / s / f.name).stat().st_ino != f.stat().st_ino
        for s in node_steps
        for f in (broadcasts / s).glob("*.safetensors")
    )
    pull_log = run_dir / "rehearsal-logs" / "relay-pull.log"
    waits = (
        [float(m) for m in re.findall(r"waited ([0-9.]+) s for the relay", pull_log.read_text())]
        if pull_log.exists()
        else []
    )
    return {
        "updates": rows,
        "node_steps": node_steps,
        "node_copies_separate": separate,
        "relay_waits_s": waits,
        "in_trainer_dir": str(broadcasts),
        "node_dir": str(node),
    }


def eval_report(run_dir: Path, arm: str) -> dict:
    """The eval pass: which steps prime-rl evaluated, and `crf-prime report` over the run directory (v0's eval as the
    baseline, the run's last eval as the arm) into ``<run_dir>/report``."""
    import subprocess
    import sys

    steps = sorted(
        int(d.name.removeprefix("step_"))
        for d in (run_dir / "rollouts").glob("step_*")
        if (d / "eval" / "all" / "traces.jsonl").is_file()
    )
    out: dict = {"steps": steps, "dir": str(run_dir / "report")}
    if not steps:
        return out
    v0 = run_dir / "rollouts" / f"step_{steps[0]}" / "eval" / "all" / "traces.jsonl"
    cmd = [str(Path(sys.executable).parent / "crf-prime"), "report", "--out", out["dir"], "--threshold", "1.0"]
    cmd += ["--runs", f"v0={v0}", f"{arm}={run_dir}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    out.update(command=" ".join(cmd), exit=proc.returncode, text=(proc.stdout + proc.stderr).strip()[-3000:])
    return out


def _journal(path: Path) -> dict:
    """Paid calls of a teacher journal: rows, answered rows, their cost."""
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    rows = [r for r in rows if "cost_usd" in r]
    return {
        "calls": len(rows),
        "ok": sum(bool(r.get("ok")) for r in rows),
        "cost_usd": round(sum(r.get("cost_usd") or 0.0 for r in rows), 6),
    }


def live_report(run_dir: Path, where: Path, steps: int) -> dict:
    """The live arm: what the live replay pool and the LLM hint writer were paid for against their caps, how many
    replay states were asked (each asks every teacher), and how many hint-source samples carry the LLM's hint."""
    import tomllib

    out: dict = {"dir": str(where)}
    overlay = json.loads((where / "overlay.json").read_text())["orchestrator"]["train"]["source"]
    replay = [s["name"] for s in overlay if s["env"]["taskset"]["id"] == "trace-replay"]
    hinted = [s["name"] for s in overlay if (s.get("algo") or {}).get("type") == "opsd"]
    if replay:
        pool = tomllib.loads((where / "teachers.toml").read_text())
        states = set()
        for step in range(1, steps + 1):
            for episode in _episodes(run_dir, step, "all"):
                if episode["env"]["name"] in replay:
                    states |= {t["task"]["data"]["state_id"] for t in episode["traces"]}
        out["replay"] = {
            **_journal(where / "pool-journal.jsonl"),
            "cap_usd": pool["budget"]["job_usd"],
            "states_asked": len(states),
            "calls_without_cap": len(states) * len(pool["teachers"]),
        }
    if hinted:
        writer = json.loads((where / "overlay.json").read_text())
        cap = next(s for s in writer["orchestrator"]["train"]["source"] if s["name"] in hinted)
        samples = llm = templated_after_cap = 0
        for step in range(1, steps + 1):
            for episode in _episodes(run_dir, step):
                if episode["env"]["name"] not in hinted:
                    continue
                for trace in episode["traces"]:
                    info = trace.get("info") or {}
                    samples += 1
                    llm += "Restore the deleted function" in (info.get("hint") or "")
                    templated_after_cap += "budget" in str(info.get("hint_error") or "").lower()
        out["hints"] = {
            **_journal(where / "hints-journal.jsonl"),
            "cap_usd": cap["env"]["taskset"]["task"]["hint_writer"]["budget_usd"],
            "samples": samples,
            "llm_hints": llm,
            "templated_after_cap": templated_after_cap,
        }
    return out


def _live_checks(live: dict) -> list[str]:
    failed = []
    if r := live.get("replay"):
        if not r["ok"]:
            failed.append("live replay: the live teacher pool answered no call (env servers never asked it)")
        if r["cost_usd"] > r["cap_usd"] + 1e-9:
            failed.append(f"live replay: spent {r['cost_usd']} USD over the cap {r['cap_usd']}")
        if r["calls"] >= r["calls_without_cap"]:
            failed.append(
                f"live replay: the budget did not bind ({r['calls']} paid calls for {r['states_asked']} states asked)"
            )
    if h := live.get("hints"):
        if not h["ok"]:
            failed.append("live hints: the LLM hint writer answered no call")
        if h["cost_usd"] > h["cap_usd"] + 1e-9:
            failed.append(f"live hints: spent {h['cost_usd']} USD over the cap {h['cap_usd']}")
    return failed


def _relay_checks(relay: dict, steps: int) -> list[str]:
    failed = []
    # the orchestrator samples step N's batch from weights no older than N - 2 (one step of lag), so a run of `steps`
    # steps loads at least steps 1 .. steps - 2 after the startup weights (step_0)
    loaded = [u for u in relay["updates"] if u["step"] != "step_0"]
    if len(loaded) < max(1, steps - 2):
        failed.append(f"relay: the inference node loaded {len(loaded)} trainer steps, expected at least {steps - 2}")
    if bad := [u["step"] for u in relay["updates"] if u["equal"] is False]:
        failed.append(f"relay: the node loaded weights that differ from the trainer's for {bad}")
    if not relay["node_steps"]:
        failed.append("relay: the node's broadcast directory holds no complete step")
    if not relay["node_copies_separate"]:
        failed.append("relay: the node's step files are the trainer's own (same inode), not relayed copies")
    return failed


def _checks(report: dict) -> list[str]:
    """Failed checks of one arm (empty: all passed)."""
    failed = []
    if report["status"] != "ok":
        failed.append(report["status"])
    if report["leftover_processes"]:
        failed.append(f"processes left behind: {report['leftover_processes']}")
    if "live" in report:
        failed += _live_checks(report["live"])
    if "eval" in report:
        e = report["eval"]
        if len(e["steps"]) < 2:
            failed.append(f"eval: prime-rl evaluated at steps {e['steps']}, expected v0 and a later step")
        elif e["exit"] != 0 or not (Path(e["dir"]) / "report.md").is_file():
            failed.append(f"eval: crf-prime report failed (exit {e['exit']}): {e['text'][-500:]}")
    if "relay" in report:
        failed += _relay_checks(report["relay"], len(report["steps"]))
    if report["hint_sources"] and not report["scoring_calls_with_hint_block"]:
        failed.append("no opsd scoring call carried the hint template (reference logprobs not computed with the hint)")
    trained = {s for row in report["steps"] for s in ((row["trainer"] or {}).get("samples_per_source") or {})}
    for source in report["sources"]:
        if source not in trained:
            failed.append(f"source {source}: no sample reached the trainer in {len(report['steps'])} steps")
    for row in report["steps"]:
        step, trainer = row["step"], row["trainer"]
        if trainer is None:
            failed.append(f"step {step}: the trainer stand-in did not run it")
            continue
        if not trainer["finite"]:
            failed.append(f"step {step}: non-finite loss or metric")
        if not row["sources"]:
            failed.append(f"step {step}: no rollouts in the batch")
        if row["regrade"]["mismatches"]:
            failed.append(f"step {step}: reward differs from the grader: {row['regrade']['mismatches']}")
        hint_tokens = trainer["distill"]["tokens"]
        if report["hint_sources"] and trainer["distill"]["tokens_in_error_turns"] != hint_tokens:
            outside = hint_tokens - trainer["distill"]["tokens_in_error_turns"]
            failed.append(f"step {step}: {outside} of {hint_tokens} distilled tokens lie outside the error turns")
        if report["hint_sources"] and row["hints"]["empty"]:
            failed.append(f"step {step}: {row['hints']['empty']} distilled sample(s) with an empty hint")
        if (
            report["hint_sources"]
            and trainer["distill"]["samples"]
            and not trainer["distill"]["ref_differs_from_inference"]
        ):
            failed.append(
                f"step {step}: hint-source reference logprobs equal the sampling logprobs ({hint_tokens} tokens)"
            )
    return failed


SHARE_KEYS = ("hint_done", "all_done", "with_site", "distilled", "samples", "batch")


def share_counts(report: dict, row: dict) -> dict[str, int]:
    """One step's counts behind the hint share: rollouts finished (hint source / all), hint rollouts with an error
    site, hint-distilled trainer samples, trainer samples, and the batch size they were cut from."""
    done = row["finished"]["rollouts"]
    samples = (row["trainer"] or {}).get("samples_per_source", {})
    return {
        "hint_done": sum(done.get(s, 0) for s in report["hint_sources"]),
        "all_done": sum(done.values()),
        "with_site": row["finished"]["hint_with_error_site"],
        "distilled": ((row["trainer"] or {}).get("distill") or {}).get("samples", 0),
        "samples": sum(samples.values()),
        "batch": report["batch_size"],
    }


def _expected(report: dict, m: dict[str, int], rho: float | None = None) -> str:
    """ρp/(ρp+(1-ρ)q) from ρ (default: the configured one), the measured p and q (the batch is cut before the
    zero-advantage filter: its other traces are batch − distilled, of which samples − distilled reached the
    trainer)."""
    rho = report["configured_hint_share"] if rho is None else rho
    p = m["with_site"] / m["hint_done"] if m["hint_done"] else 0.0
    others = m["batch"] - m["distilled"]
    q = (m["samples"] - m["distilled"]) / others if others > 0 else 1.0
    return f"ρ={rho:.2f} p={p:.2f} q={q:.2f}: {distilled_share(rho, p, q):.0%}"


def _median_max(values: list[int]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[len(ordered) // 2]}, {ordered[-1]}"


def print_off_policy(report: dict) -> None:
    """Per step of a learning arm: mean reward, the off-policy figures and every objective's loss on the batch."""
    print("step | mean reward | mismatch KL | ratio min–max | clip frac | masked frac | loss | objectives' losses")
    for row in report["steps"]:
        t = row["trainer"] or {}
        o = t.get("off_policy") or {}
        rewards = [r for src in row["sources"].values() for r in src["rewards"]]
        losses = ", ".join(f"{k}={v:+.4f}" for k, v in (t.get("objective_losses") or {}).items())
        cells = [
            str(row["step"]),
            f"{sum(rewards) / len(rewards):.3f}" if rewards else "-",
            f"{o.get('mismatch_kl', float('nan')):.5f}",
            f"{o.get('ratio_min', float('nan')):.3f}–{o.get('ratio_max', float('nan')):.3f}",
            f"{o.get('clip_frac', float('nan')):.3f}",
            f"{o.get('masked_frac', float('nan')):.3f}",
            f"{t.get('loss', float('nan')):+.4f}",
            losses,
        ]
        print(" | ".join(cells))


def print_report(reports: list[dict], total_s: float) -> bool:
    ok = True
    for report in reports:
        print(f"\n== arm {report['arm']}: {report['status']}, wall {report['wall_s']:.0f} s, "
              f"processes left: {len(report['leftover_processes'])}")  # fmt: skip
        if report.get("policy") == "sample":
            print_off_policy(report)
            failed = _checks(report)
            for f in failed:
                print(f"FAILED: {f}")
            ok = ok and not failed
            continue
        header = "step | rollouts per source | mean reward per source | reward = grader | loss | finite"
        if report["hint_sources"]:
            header += (
                " | hint rollouts finished (with error site) | hint-distilled samples | expected (ρp/(ρp+(1-ρ)q))"
                " | distilled tokens in error turns | empty hints | ref≠sampling tokens"
                " | distilled turns | tokens between hint and turn (median, max)"
            )
        header += " | replay rewards" if any("replay" in r["sources"] for r in report["steps"]) else ""
        print(header)
        for row in report["steps"]:
            t = row["trainer"] or {}
            src = row["sources"]
            cells = [
                str(row["step"]),
                ", ".join(f"{s}={v['rollouts']}" for s, v in sorted(src.items())),
                ", ".join(f"{s}={sum(v['rewards']) / len(v['rewards']):.2f}" for s, v in sorted(src.items())),
                f"{row['regrade']['equal']}/{row['regrade']['checked']}",
                f"{t.get('loss', float('nan')):.4f}",
                str(t.get("finite")),
            ]
            if report["hint_sources"]:
                d = t.get("distill", {})
                inside = d.get("tokens_in_error_turns", 0)
                m = share_counts(report, row)
                cells += [
                    f"{m['hint_done']}/{m['all_done']} ({m['with_site']})",
                    f"{m['distilled']}/{m['samples']} = {m['distilled'] / max(m['samples'], 1):.0%}",
                    _expected(report, m),
                    f"{inside}/{d.get('tokens', 0)} = {inside / max(d.get('tokens', 0), 1):.0%}"
                    + (f" ({d['tokens_unattributed']} unattributed)" if d.get("tokens_unattributed") else ""),
                    f"{row['hints']['empty']}/{row['hints']['samples']}",
                    str(d.get("ref_differs_from_inference", 0)),
                    str(d.get("turns", 0)),
                    _median_max(d.get("hint_distances", [])),
                ]
            if "replay" in src:
                cells.append(" ".join(f"{x:g}" for x in src["replay"]["rewards"]))
            print(" | ".join(cells))
        if report["hint_sources"]:
            rho = report["configured_hint_share"]
            m = {k: sum(share_counts(report, row)[k] for row in report["steps"]) for k in SHARE_KEYS}
            m["batch"] = report["batch_size"] * len(report["steps"])
            print(
                f"configured share of rollouts from the hint source (ratio·group_size normalised): ρ = {rho:.1%}; "
                "a hint rollout without an error site yields no sample, so the expected hint-distilled share of "
                "samples is ρp/(ρp+(1-ρ)q): p = hint rollouts with an error site, q = other samples left after "
                "prime-rl's zero-advantage filter"
            )
            print(
                f"all {len(report['steps'])} steps: hint rollouts {m['hint_done']}/{m['all_done']} = "
                f"{m['hint_done'] / max(m['all_done'], 1):.0%} of the rollouts finished (configured {rho:.0%}); "
                f"hint-distilled samples {m['distilled']}/{m['samples']} = {m['distilled'] / max(m['samples'], 1):.0%}"
                f"; expected {_expected(report, m)}, at the drawn share "
                f"{_expected(report, m, m['hint_done'] / max(m['all_done'], 1))}"
            )
            print(
                f"opsd scoring calls to the inference server: {report['scoring_calls']}, of which "
                f"{report['scoring_calls_with_hint_block']} start with the arm's hint template as a system message"
            )
            print("error-site detector on this arm's Feature Deletion episodes (per episode, planted vs found):")
            for kind, sc in report["detector"].items():
                prec = sc["tp"] / (sc["tp"] + sc["fp"]) if sc["tp"] + sc["fp"] else float("nan")
                rec = sc["tp"] / (sc["tp"] + sc["fn"]) if sc["tp"] + sc["fn"] else float("nan")
                print(f"  {kind}: precision {prec:.2f} recall {rec:.2f} (tp {sc['tp']}, fp {sc['fp']}, fn {sc['fn']})")
        if e := report.get("eval"):
            print(f"eval pass at steps {e['steps']}; crf-prime report from the run directory ({e['dir']}):")
            print(e.get("text", "(none)"))
        if r := (report.get("live") or {}).get("replay"):
            print(
                f"live teacher pool: {r['states_asked']} replay states asked, every teacher at each "
                f"({r['calls_without_cap']} calls without a cap); paid calls {r['calls']} ({r['ok']} answered), "
                f"{r['cost_usd']:.4f} USD of the {r['cap_usd']} USD cap"
            )
        if h := (report.get("live") or {}).get("hints"):
            print(
                f"LLM hint writer: {h['calls']} paid calls ({h['ok']} answered), {h['cost_usd']:.4f} USD of the "
                f"{h['cap_usd']} USD cap; hint-source samples {h['samples']}: {h['llm_hints']} with the LLM's hint, "
                f"{h['templated_after_cap']} templated after the cap"
            )
        if "relay" in report:
            r = report["relay"]
            equal = sum(u["equal"] is True for u in r["updates"])
            waits = r["relay_waits_s"]
            print(
                f"relay: the inference node loaded {len(r['updates'])} weight updates ({equal} checked byte-equal to "
                f"the trainer's step; the rest already pruned), node dir {r['node_dir']} holds {r['node_steps']} "
                f"(own copies: {r['node_copies_separate']}); the gate held {len(waits)} update(s) for the relay"
                + (f", longest {max(waits):.2f} s" if waits else "")
            )
        failed = _checks(report)
        for f in failed:
            print(f"FAILED: {f}")
        ok = ok and not failed
    print(f"\ntotal wall time {total_s:.0f} s; {'all checks passed' if ok else 'CHECKS FAILED'}")
    return ok
