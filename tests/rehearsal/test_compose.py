"""Opt-in: scripts/rehearse/compose.py (several arms composed in one process) writes the sub-configs that prime-rl's
own ``rl ... --dry-run`` writes for each arm alone, so sharing the launcher's imports changes nothing it composes.

    CRF_PRIME_RL_SRC=/path/to/prime-rl pytest tests/rehearsal/test_compose.py -m prime_rl
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from rehearse_support import REHEARSE, load_script

pytestmark = [pytest.mark.prime_rl]

rehearse = load_script("rehearsal_rehearse", REHEARSE / "rehearse.py")
VENV = Path(os.environ.get("CRF_REHEARSAL_VENV", Path.home() / ".cache/crf-prime/rehearsal-venv"))
ARMS = ("learn-cispo", "learn-a0")
PORTS = (21000, 21001, 21002, 21004)


def _configs(run_dir: Path, work: Path) -> dict[str, object]:
    """Every sub-config the launcher wrote, with the work directory written as ``WORK``."""
    return {
        str(p.relative_to(run_dir)): json.loads(p.read_text().replace(str(work), "WORK"))
        for p in sorted((run_dir / "configs").rglob("*.json"))
    }


@pytest.mark.timeout(600)
def test_one_process_composes_what_the_launcher_composes_arm_by_arm(tmp_path: Path) -> None:
    if not (VENV / "bin" / "rl").is_file() or not os.environ.get("CRF_PRIME_RL_SRC"):
        pytest.skip("needs the rehearsal venv (scripts/rehearse/build_venv.sh) and CRF_PRIME_RL_SRC")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REHEARSE / "shims"), str(REHEARSE / "tasksets")])}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(VENV / "rehearsal-pycache")
    together, alone = tmp_path / "together", tmp_path / "alone"
    jobs = []
    for arm in ARMS:
        for work in (together, alone):
            (work / "model").mkdir(parents=True, exist_ok=True)
        args = rehearse._compose_args(arm, {"echo_model": together / "model"}, together, 12, PORTS, (), 22000)
        jobs.append({"args": args, "env": {"PRL_RUN_NAME": f"rehearsal-{arm}"}})
        solo = rehearse._compose_args(arm, {"echo_model": alone / "model"}, alone, 12, PORTS, (), 22000)
        proc = subprocess.run([str(VENV / "bin" / "rl"), *solo], cwd=alone, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    proc = subprocess.run(
        [str(VENV / "bin" / "python"), str(REHEARSE / "compose.py"), str(tmp_path / "jobs.json")],
        cwd=together,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [json.loads(line)["job"] for line in proc.stdout.splitlines() if line.startswith('{"job"')] == [0, 1]
    for arm in ARMS:
        mine = _configs(together / "outputs" / f"rehearsal-{arm}", together)
        theirs = _configs(alone / "outputs" / f"rehearsal-{arm}", alone)
        assert mine and mine == theirs, arm
    cispo = _configs(together / "outputs" / "rehearsal-learn-cispo", together)["configs/trainer.json"]
    assert cispo["loss"]["kwargs"] == {"ratio_max": rehearse.CISPO_RATIO_MAX}  # the rehearsal's clip bound
