"""Pair output: TRL DPO JSONL (written atomically) and, with the ``hf`` extra, a ``datasets.Dataset``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from crf_prime.extras import require
from crf_prime.pairs.build import PreferencePair


def write_pairs_jsonl(pairs: Iterable[PreferencePair], out: str | Path) -> int:
    """One pair per line (``prompt``/``chosen``/``rejected`` + ``tools`` + provenance); returns the count."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    n = 0
    try:
        with tmp.open("w", encoding="utf-8") as f:
            for p in pairs:
                f.write(p.model_dump_json())
                f.write("\n")
                n += 1
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return n


def read_pairs_jsonl(path: str | Path) -> list[PreferencePair]:
    with Path(path).open(encoding="utf-8") as f:
        return [PreferencePair.model_validate_json(line) for line in f if line.strip()]


def _uniform(msg: dict[str, Any]) -> dict[str, Any]:
    """Arrow needs one schema per column: every message gets role/content/tool_calls/tool_call_id."""
    return {
        "role": msg["role"],
        "content": msg.get("content") if isinstance(msg.get("content"), str) else "",
        "tool_calls": [
            {
                "id": c.get("id", ""),
                "type": "function",
                "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]},
            }
            for c in msg.get("tool_calls") or ()
        ],
        "tool_call_id": msg.get("tool_call_id") or "",
    }


def to_hf_dataset(pairs: Sequence[PreferencePair]):  # -> datasets.Dataset
    """A ``datasets.Dataset`` in TRL's conversational preference format (``pip install 'crf-prime[hf]'``).

    Tool schemas are stored as JSON strings (their shapes differ per tool); ``json.loads`` them before passing
    ``tools=`` to a chat template.
    """
    datasets = require("datasets", "hf")
    rows = [
        {
            "prompt": [_uniform(m) for m in p.prompt],
            "chosen": [_uniform(m) for m in p.chosen],
            "rejected": [_uniform(m) for m in p.rejected],
            "tools": json.dumps(p.tools),
            "state_id": p.state_id,
            "trace_id": p.trace_id,
            "kind": p.kind,
            "margin": p.margin,
        }
        for p in pairs
    ]
    return datasets.Dataset.from_list(rows)
