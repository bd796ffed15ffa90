"""Print the hack suite's table: each attempt's reward, whether it acted on the host, the forgery flag and the gold
judge's verdict; for the attempts a defence closes alone, also the reward with that defence switched off.

Run from the repo root: ``.venv/bin/python tests/swe/swe_hack_table.py [NAME ...]`` (needs bubblewrap). Used for the
closing notes of issues 18 and 26 (before / after columns come from running it on the two commits).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2] / "environments" / "swebench_lite"))

import verifiers.v1 as vf
from swe_hacks import ATTACKS, attempt, without_test_id_plugin
from swebench_lite import SweTaskConfig, SweTaskset, SweTasksetConfig
from verifiers.v1.runtimes import provision_runtime

from crf_prime.swe.fixture import build_mini_swebench
from crf_prime.swe.runner import SweGradingConfig


async def _run(attack, root: Path, *, gold_judge: bool = True, test_id_plugin: bool = True, **task: object):
    if not gold_judge:
        task["grading"] = SweGradingConfig(gold_judge=False)
    if not test_id_plugin:
        with without_test_id_plugin():
            return await _run(attack, root, gold_judge=gold_judge, **task)
    build_mini_swebench(root / "fixture")
    config = SweTasksetConfig(
        id="swebench-lite",
        dataset=str(root / "fixture" / "instances.jsonl"),
        repos_dir=root / "fixture" / "repos",
        task=SweTaskConfig(**task),
    )
    (task_,) = list(SweTaskset(config))
    outcome = None
    try:
        async with provision_runtime(vf.SubprocessConfig()) as runtime:
            outcome = await attempt(task_, runtime, attack, root / "host")
    except Exception as e:  # the runtime's own teardown (verifiers) failing on what the agent left
        if outcome is None:
            raise
        outcome.info["teardown"] = f"runtime teardown failed: {type(e).__name__}"
    return outcome


async def main(names: list[str]) -> None:
    print("| attempt | class | resolved | defence off | host effect | suspected_forgery | gold judge | reason |")
    print("|---|---|---|---|---|---|---|---|")
    for attack in ATTACKS:
        if names and attack.name not in names:
            continue
        tmp = tempfile.mkdtemp()
        try:
            out = await _run(attack, Path(tmp))
            if attack.host_marker is not None and "watcher" in attack.script:
                await asyncio.sleep(10)  # the host-side watcher (old code) lives ~8 s
            resolved = "infra error" if out.reward is None else ("yes" if out.reward == 1.0 else "no")
            if getattr(out, "leftovers", ()):
                resolved += f"; left on host: {len(out.leftovers)} dir(s)"
            if not getattr(out, "shippable", True):
                resolved += "; trace not shippable"
            if "teardown" in out.info:
                resolved += f"; {out.info['teardown']}"
            off = await _defence_off(attack)
            host = (
                "-"
                if attack.host_marker is None and attack.host_must_survive is None
                else ("yes" if out.host_effect else "no")
            )
            suspected = "-" if out.suspected is None else f"{out.suspected:g}"
            reason = out.error or out.info.get("reason", "")
            judge = out.info.get("gold_judge", {}).get("verdict", "-")
            row = [attack.name, attack.group, resolved, off, host, suspected, judge, reason[:90]]
            print("| " + " | ".join(row) + " |", flush=True)
        finally:
            _remove(tmp)


async def _defence_off(attack) -> str:
    """Reward with the attempt's own defence switched off ("-" when no single switch closes it)."""
    runs: list[tuple[str, dict]] = []
    if getattr(attack, "remaining", False):
        runs = [("gold judge off", {"gold_judge": False})]
        runs.append(("and reject_suspected_forgery", {"gold_judge": False, "reject_suspected_forgery": True}))
    elif getattr(attack, "hides_test_id", False):
        runs = [("gold judge off", {"gold_judge": False})]
        runs.append(("and test-id plugin off", {"gold_judge": False, "test_id_plugin": False}))
    cells = []
    for label, switches in runs:
        tmp = tempfile.mkdtemp()
        try:
            out = await _run(attack, Path(tmp), **switches)
        finally:
            _remove(tmp)
        cells.append(f"{label}: {'yes' if out.reward == 1.0 else 'no'}")
    return "; ".join(cells) or "-"


def _remove(path: str) -> None:
    """``rm -rf`` (deep and mode-000 trees included), as root: what is left must not break the next attempt."""
    subprocess.run(["chmod", "-R", "u+rwx", path], capture_output=True, check=False)
    subprocess.run(["rm", "-rf", path], check=False)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
