"""``crf-prime hints --traces traces.jsonl``: re-run error-site detection over saved episodes and show the hints.

Useful to inspect what channel 2 would feed opsd for a vf-eval run or a prime-rl rollout file. The failing tests
are not in the messages: the environment recorded them with the hint (``trace.info["hint_sites"]``), so the rebuilt
hint uses those, as the environment's own did.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field
from pydantic_config import BaseConfig

from crf_prime.errors import InputError
from crf_prime.hints import SITES_KEY, FailingTest, build_hint
from crf_prime.outputs import output_file

if TYPE_CHECKING:
    from crf_prime.hints import FailingTest


class HintsConfig(BaseConfig):
    traces: Path
    """traces.jsonl of verifiers Episode records (a file: vf-eval results, prime-rl rollouts/step_N/...)."""
    show: Annotated[int, Field(ge=0)] = 3
    """Hints to print."""
    out: Path | None = None
    """Output file: one ``{episode, trace, hint, sites}`` JSON row per trace (written atomically)."""


def recorded_failing_tests(trace: Any) -> list[FailingTest]:
    """The failing tests the environment stored on the trace with its hint (their messages are not stored)."""

    info = trace.get("info") if isinstance(trace, dict) else None
    sites = info.get(SITES_KEY) if isinstance(info, dict) else None
    return [
        FailingTest(name=str(s["tool"]))
        for s in sites or ()
        if isinstance(s, dict) and s.get("kind") == "failing_test" and s.get("tool")
    ]


def run(config: HintsConfig) -> int:
    """Error sites and channel-2 hints of saved episodes (a verifiers traces.jsonl)."""

    from rich.console import Console  # start-up: +341 ms on every command
    from rich.markup import escape  # start-up: +140 ms on every command
    from rich.table import Table  # start-up: +55 ms on every command

    if not config.traces.is_file():
        why = "is a directory; give its traces.jsonl" if config.traces.is_dir() else "no such file"
        raise InputError.field("traces", f"{config.traces} {why}")
    if config.out is not None:
        output_file("out", config.out)
    console = Console()
    kinds: Counter[str] = Counter()
    rows = []
    with config.traces.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                episode = json.loads(line)
                traces = episode["traces"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise InputError.at(config.traces, lineno, f"not a verifiers episode record ({e})") from None
            for trace in traces:
                hint, sites = build_hint(trace, failing_tests=recorded_failing_tests(trace))
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
    for r in with_hint[: config.show]:
        console.print(f"[bold]{escape(str(r['trace']))}[/bold]\n{escape(r['hint'])}\n")
    if config.out is not None:
        config.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = config.out.with_name(config.out.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps({**r, "sites": [s.model_dump() for s in r["sites"]]}) + "\n")
        tmp.replace(config.out)
        console.print(f"wrote {len(rows)} rows to {config.out}", markup=False, soft_wrap=True)
    return 0
