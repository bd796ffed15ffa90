"""``crf-prime hints TRACES.jsonl``: re-run error-site detection over saved episodes and show the hints (argparse only
at import). Useful to inspect what channel 2 would feed opsd for a vf-eval run or a prime-rl rollout file."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "hints",
        help="error sites and channel-2 hints of saved episodes (traces.jsonl)",
        description=(
            "Analyse every trace of a verifiers traces.jsonl (vf-eval results, prime-rl rollouts/step_N/...) and "
            "print error-site counts per kind and the hints; --out writes one JSON row per trace. Channel 2 "
            "(hint self-distillation) is Cursor's recipe; the detectors and templates are crf-prime's."
        ),
    )
    p.add_argument("traces", type=Path, help="traces.jsonl of verifiers Episode records")
    p.add_argument("--show", type=int, default=3, help="hints to print (default 3)")
    p.add_argument("--out", type=Path, help="write {episode, trace, hint, sites} rows as JSONL here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    from collections import Counter

    from rich.console import Console
    from rich.table import Table

    from crf_prime.hints import build_hint

    console = Console()
    kinds: Counter[str] = Counter()
    rows = []
    with args.traces.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                episode = json.loads(line)
                traces = episode["traces"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                console.print(
                    f"[red]error:[/red] {args.traces}:{lineno}: not a verifiers episode record ({e})", soft_wrap=True
                )
                return 2
            for trace in traces:
                hint, sites = build_hint(trace)
                kinds.update(s.kind for s in sites)
                rows.append({"episode": episode.get("id"), "trace": trace.get("id"), "hint": hint, "sites": sites})
    table = Table(title=f"error sites in {len(rows)} traces")
    table.add_column("kind")
    table.add_column("count", justify="right")
    for kind, n in kinds.most_common():
        table.add_row(kind, str(n))
    console.print(table)
    with_hint = [r for r in rows if r["hint"]]
    console.print(f"{len(with_hint)} of {len(rows)} traces get a non-empty hint")
    for r in with_hint[: args.show]:
        console.print(f"[bold]{r['trace']}[/bold]\n{r['hint']}\n")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_name(args.out.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps({**r, "sites": [s.model_dump() for s in r["sites"]]}) + "\n")
        tmp.replace(args.out)
    return 0
