"""Per-arm, per-step table of a rehearsal run (filled in below)."""

from __future__ import annotations

import json
from pathlib import Path


def arm_report(run_dir: Path, steps: int, hint_sources: list[str], inputs: dict[str, Path]) -> dict:
    rows = []
    for step in range(1, steps + 1):
        f = run_dir / "rehearsal" / f"trainer_step_{step}.json"
        rows.append(json.loads(f.read_text()) if f.exists() else {"step": step, "missing": True})
    return {"steps": rows}


def print_report(reports: list[dict], total: float) -> bool:
    print(json.dumps(reports, indent=1)[:5000])
    return all(r["status"] == "ok" for r in reports)
