"""A test dependency that depends on the project (importlib-metadata's pytest-perf -> keyring -> importlib-metadata):
the test venv leaves the project's own distribution out instead of refusing the project. Offline: a local wheel
directory stands in for the index."""

from __future__ import annotations

import hashlib
import json
import sys
import zipfile
from pathlib import Path

import pytest

from crf_prime.featdel.models import TestEnvSpec
from crf_prime.featdel.source import SourceError
from crf_prime.featdel.testenv import ensure_test_env, pinned, spec_key, without

PY = f"{sys.version_info.major}.{sys.version_info.minor}"


def wheel(where: Path, dist: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A pure-Python wheel ``dist==version`` (module ``dist`` with ``-`` as ``_``) requiring ``requires``."""
    module, name = dist.replace("-", "_"), f"{dist.replace('-', '_')}-{version}"
    meta = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    files = {
        f"{module}/__init__.py": "VALUE = 1\n",
        f"{name}.dist-info/METADATA": meta,
        f"{name}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{name}.dist-info/RECORD"] = "".join(f"{k},,\n" for k in [*files, f"{name}.dist-info/RECORD"])
    where.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(where / f"{name}-py3-none-any.whl", "w") as z:
        for k, v in files.items():
            z.writestr(k, v)


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Wheels of the project ``crfproj`` and of ``crfproj-user``, a test dependency that depends on it; offline."""
    wheels = tmp_path / "wheels"
    wheel(wheels, "crfproj", "1.0")
    wheel(wheels, "crfproj-user", "2.0", ("crfproj>=1",))
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("UV_OFFLINE", "1")
    return wheels


def test_without_drops_the_named_pins_and_records_them() -> None:
    spec = TestEnvSpec(python=PY, requirements=("Crf_Proj==1.0", "crfproj-user==2.0", "pytest==9.0"))
    got = without(spec, ("crf-proj",))
    assert got.requirements == ("crfproj-user==2.0", "pytest==9.0")
    assert got.excluded == ("Crf_Proj==1.0",)
    assert without(spec, ("other",)) is spec  # nothing pulls it in: the spec (and its venv) unchanged


def test_a_spec_without_exclusions_keeps_its_venv_name() -> None:
    spec = TestEnvSpec(python=PY, requirements=("pytest==9.0",))
    before = json.dumps({"python": PY, "requirements": ["pytest==9.0"]}, sort_keys=True)  # the key's old input
    assert spec_key(spec) == hashlib.sha256(before.encode()).hexdigest()[:16]
    assert spec_key(spec.model_copy(update={"excluded": ("x==1",)})) != spec_key(spec)


def test_resolution_leaves_the_project_out_and_the_venv_cannot_import_it(index: Path, tmp_path: Path) -> None:
    spec = pinned(TestEnvSpec(python=PY, requirements=("crfproj-user",)), exclude=("crfproj",), cache=tmp_path)
    assert spec.requirements == ("crfproj-user==2.0",)
    assert spec.excluded == ("crfproj==1.0",)
    env = ensure_test_env(spec, ("crfproj",), cache=tmp_path)  # installed without dependencies: no copy
    assert (env.venv / "lib" / f"python{PY}" / "site-packages" / "crfproj_user").is_dir()
    # the same pins followed by their dependencies would put the project in the venv: refused, as before
    with pytest.raises(SourceError, match=r"can import the project itself \(crfproj\)"):
        ensure_test_env(spec.model_copy(update={"excluded": ()}), ("crfproj",), cache=tmp_path)
