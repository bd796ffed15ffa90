"""``crf-prime traces ingest`` cost of printing the output size first: the sizing pass against the writing pass.

Builds one Claude Code JSONL of many concatenated sessions (tool results of a few KB, as in real sessions), then
times, in the same run, the writing pass alone (the baseline: ``ingest_to_jsonl``) and the sizing pass
(``estimate_output``) with and without a context cap, and prints the ratios and how close the estimate is.

    .venv/bin/python benchmarks/ingest.py [--sessions 40] [--turns 60]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from crf_prime.traces.ingest import estimate_output, ingest_to_jsonl


def write_sessions(path: Path, sessions: int, turns: int, result_chars: int) -> None:
    with path.open("w") as f:
        for s in range(sessions):
            env = {"sessionId": f"s{s}", "isSidechain": False, "cwd": "/home/dev/proj", "version": "2.0.14"}
            parent = None
            for t in range(turns):
                u, a = f"s{s}-u{t}", f"s{s}-a{t}"
                content = (
                    "Fix the failing test."
                    if t == 0
                    else [{"type": "tool_result", "tool_use_id": f"toolu-{s}-{t - 1}", "content": "x" * result_chars}]
                )
                rows = [
                    {
                        **env,
                        "type": "user",
                        "uuid": u,
                        "parentUuid": parent,
                        "message": {"role": "user", "content": content},
                    },
                    {
                        **env,
                        "type": "assistant",
                        "uuid": a,
                        "parentUuid": u,
                        "message": {
                            "id": f"msg-{s}-{t}",
                            "role": "assistant",
                            "model": "claude-sonnet-4-5",
                            "content": [
                                {"type": "text", "text": f"Step {t}: look at the next file."},
                                {
                                    "type": "tool_use",
                                    "id": f"toolu-{s}-{t}",
                                    "name": "Read",
                                    "input": {"file_path": f"/p/{t}.py"},
                                },
                            ],
                        },
                    },
                ]
                f.writelines(json.dumps(r) + "\n" for r in rows)
                parent = a


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=40)
    ap.add_argument("--turns", type=int, default=60)
    ap.add_argument("--result-chars", type=int, default=3000)
    ap.add_argument("--cap", type=int, default=50_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "sessions.jsonl", Path(tmp) / "states.jsonl"
        write_sessions(src, args.sessions, args.turns, args.result_chars)
        rows = []
        for cap in (None, args.cap):
            write_s, report = timed(lambda cap=cap: ingest_to_jsonl([src], out, max_context_chars=cap))
            size_s, (_, chars) = timed(lambda cap=cap: estimate_output([src], max_context_chars=cap))
            rows.append((cap, report.states, src.stat().st_size, out.stat().st_size, chars, write_s, size_s))
    table = Table(title=f"ingest: {args.sessions} sessions x {args.turns} turns in one file")
    for col in ("cap", "states", "input MB", "written MB", "estimate/written", "write s", "sizing s", "sizing/write"):
        table.add_column(col, justify="right")
    for cap, states, in_b, out_b, est, write_s, size_s in rows:
        table.add_row(
            str(cap or "none"),
            str(states),
            f"{in_b / 1e6:.1f}",
            f"{out_b / 1e6:.1f}",
            f"{est / out_b:.2f}",
            f"{write_s:.2f}",
            f"{size_s:.2f}",
            f"{size_s / write_s:.2f}",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
