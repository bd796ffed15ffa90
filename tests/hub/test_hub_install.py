"""Environments hub, offline: every environment package carries the metadata `prime env push` builds from, and the
wheels installed BY NAME from a PEP 503 index on loopback (what `prime env install owner/name` does against
hub.primeintellect.ai/<owner>/simple/) load in verifiers by taskset id.

The fresh venv reaches the third-party packages already installed in this venv through a symlinked overlay that
leaves out crf-prime and the environments (see hub_index.third_party_overlay): pip must fetch those from the loopback
index, and with `--index-url` pointing only at loopback any dependency missing from both fails the install instead
of downloading (torch, verifiers...). That keeps the test offline and around 30 s.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
from hub_index import OURS, REPO, LoopbackIndex, build_wheel, env_projects, third_party_overlay, write_simple_index
from packaging.requirements import Requirement

EXPECTED_ENVS = {"feature-deletion", "swebench-lite", "trace-replay"}
VERIFIERS_VERSION = importlib.metadata.version("verifiers")
VERIFIERS_REQUIREMENT = next(
    str(Requirement(r))
    for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["verifiers"]
    if Requirement(r).name == "verifiers"
)
"""crf-prime's own ``verifiers`` extra: the environments ask for the same range (0.4.0 and prime-rl's pinned commit)."""


def test_every_environment_package_exists():
    assert set(env_projects()) == EXPECTED_ENVS


@pytest.mark.parametrize("name", sorted(EXPECTED_ENVS))
def test_pyproject_has_hub_metadata(name: str):
    project_dir = env_projects().get(name)
    assert project_dir is not None, f"environments/{name.replace('-', '_')}/pyproject.toml is missing"
    pyproject = project_dir / "pyproject.toml"
    project = tomllib.loads(pyproject.read_text())["project"]
    module = name.replace("-", "_")
    assert project_dir.name == module, f"{pyproject}: directory must be the import name {module!r}"
    assert project.get("version"), f"{pyproject}: project.version is required by `prime env push`"
    assert project.get("description"), f"{pyproject}: project.description (shown on the hub) is empty"
    readme = project.get("readme")
    assert readme and (project_dir / readme).is_file(), f"{pyproject}: project.readme must name an existing file"
    assert project.get("requires-python"), f"{pyproject}: project.requires-python is missing"
    reqs = {Requirement(r).name: Requirement(r) for r in project.get("dependencies", [])}
    assert "crf-prime" in reqs, f"{pyproject}: crf-prime must be a dependency"
    assert str(reqs.get("verifiers", "")) == VERIFIERS_REQUIREMENT, (
        f"{pyproject}: require {VERIFIERS_REQUIREMENT} like crf-prime's verifiers extra"
    )
    assert reqs["verifiers"].specifier.contains(VERIFIERS_VERSION, prereleases=True), VERIFIERS_VERSION
    packages = tomllib.loads(pyproject.read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    assert packages == [module], f"{pyproject}: the wheel must ship exactly the {module!r} package"
    assert (project_dir / module / "__init__.py").is_file()


@pytest.mark.slow
def test_install_by_name_from_loopback_index_and_load_by_id(tmp_path: Path):
    wheels_dir = tmp_path / "wheels"
    wheels_dir.mkdir()
    wheels = [build_wheel(REPO, wheels_dir)] + [build_wheel(p, wheels_dir) for p in env_projects().values()]
    for wheel in wheels[1:]:
        with zipfile.ZipFile(wheel) as zf:
            meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        requires = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
        required = {Requirement(r).name for r in requires}
        assert VERIFIERS_REQUIREMENT in requires and "crf-prime" in required, (wheel.name, requires)
    write_simple_index(wheels, tmp_path / "index")

    fresh = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True)
    fresh_py = fresh / "bin" / "python"
    fresh_site = Path(
        subprocess.run(
            [str(fresh_py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    overlay = tmp_path / "third_party"
    third_party_overlay(Path(sysconfig.get_paths()["purelib"]), overlay)
    (fresh_site / "_third_party_overlay.pth").write_text(f"import site; site.addsitedir({str(overlay)!r})\n")

    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1", "PYTHONNOUSERSITE": "1"}
    env.pop("PYTHONPATH", None)
    names = sorted(env_projects())
    with LoopbackIndex(tmp_path / "index") as index:
        pip = subprocess.run(
            [
                str(fresh_py),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-cache-dir",
                "--index-url",
                index.url,
                *names,
            ],
            capture_output=True,
            text=True,
            env=env,
        )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    installed = pip.stdout.split("Successfully installed", 1)[1].split()
    assert sorted(installed) == sorted(f"{n}-0.1.0" for n in OURS if n in {*names, "crf-prime"})
    assert {f"/simple/{n}/" for n in [*names, "crf-prime"]} <= set(index.requests)

    probe = (
        "import json, sys, crf_prime\n"
        "from verifiers.v1.utils.loaders import taskset_class\n"
        "out = {'crf_prime': crf_prime.__file__}\n"
        "for tid in sys.argv[1:]:\n"
        "    cls = taskset_class(tid)\n"
        "    out[tid] = [cls.__module__, sys.modules[cls.__module__.split('.')[0]].__file__]\n"
        "print(json.dumps(out))\n"
    )
    loaded = subprocess.run([str(fresh_py), "-c", probe, *names], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert loaded.returncode == 0, loaded.stderr
    result = json.loads(loaded.stdout)
    assert result["crf_prime"].startswith(str(fresh_site))
    for name in names:
        module, path = result[name]
        assert module.split(".")[0] == name.replace("-", "_") and path.startswith(str(fresh_site)), (name, path)
