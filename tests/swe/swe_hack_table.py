"""Print the hack suite's table: each attempt's reward, whether it acted on the host, and the forgery flag.

Run from the repo root: ``.venv/bin/python tests/swe/swe_hack_table.py`` (needs bubblewrap). Used for the
closing note of issue 18 (before / after columns come from running it on the two commits).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2] / "environments" / "swebench_lite"))

import verifiers.v1 as vf
from swe_hacks import ATTACKS, attempt
from swebench_lite import SweTaskConfig, SweTaskset, SweTasksetConfig
from verifiers.v1.runtimes import provision_runtime

from crf_prime.swe.fixture import build_mini_swebench


async def _run(attack, root: Path, **task: object):
    build_mini_swebench(root / "fixture")
    config = SweTasksetConfig(
        id="swebench-lite",
        dataset=str(root / "fixture" / "instances.jsonl"),
        repos_dir=root / "fixture" / "repos",
        task=SweTaskConfig(**task),
    )
    (task_,) = list(SweTaskset(config))
    async with provision_runtime(vf.SubprocessConfig()) as runtime:
        return await attempt(task_, runtime, attack, root / "host")


async def main(names: list[str]) -> None:
    print("| attempt | class | resolved | host effect | suspected_forgery | reason |")
    print("|---|---|---|---|---|---|")
    for attack in ATTACKS:
        if names and attack.name not in names:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            out = await _run(attack, Path(tmp))
            if attack.host_marker is not None and "watcher" in attack.script:
                await asyncio.sleep(10)  # the host-side watcher (old code) lives ~8 s
            resolved = "infra error" if out.reward is None else ("yes" if out.reward == 1.0 else "no")
            if getattr(attack, "remaining", False) and out.suspected is not None:
                with tempfile.TemporaryDirectory() as tmp:
                    strict = await _run(attack, Path(tmp), reject_suspected_forgery=True)
                resolved += f" ({'yes' if strict.reward == 1.0 else 'no'} with reject_suspected_forgery)"
            host = (
                "-"
                if attack.host_marker is None and attack.host_must_survive is None
                else ("yes" if out.host_effect else "no")
            )
            suspected = "-" if out.suspected is None else f"{out.suspected:g}"
            reason = out.error or out.info.get("reason", "")
            print(f"| {attack.name} | {attack.group} | {resolved} | {host} | {suspected} | {reason[:90]} |", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
