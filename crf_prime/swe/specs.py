"""How each SWE-bench-lite repository is tested inside its ``sweb.eval`` image.

The commands are the facts the swebench harness used for the Lite repos (swebench <= 4.1.0
``harness/constants/python.py``: ``test_cmd``, the re-run ``install`` step and ``eval_commands``; the parser per
repo from ``MAP_REPO_TO_PARSER_PY``). swebench 5.x moved this knowledge into dataset columns, so it is kept here
as a small table of our own. A row's own ``test_cmd`` / ``log_parser`` columns win over the table, which is how
custom instances (and the offline mini fixture) say how they are tested.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from crf_prime.errors import InputError
from crf_prime.swe.instance import SweInstance

PYTEST = "pytest -rA"
ASTROPY_OLD = "pytest -rA -vv -o console_output_style=classic --tb=no"
DJANGO = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
DJANGO_1_9 = "./tests/runtests.py --verbosity 2"
SEABORN = "pytest --no-header -rA"
SPHINX = "tox --current-env -epy39 -v --"
SYMPY = "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose"

_DJANGO_LOCALE = (
    "export LANG=en_US.UTF-8",
    "export LC_ALL=en_US.UTF-8",
    "export PYTHONIOENCODING=utf8",
    "export LANGUAGE=en_US:en",
)
_DJANGO_3_LOCALE = (
    "sed -i '/en_US.UTF-8/s/^# //g' /etc/locale.gen && locale-gen",
    "export LANG=en_US.UTF-8",
    "export LANGUAGE=en_US:en",
    "export LC_ALL=en_US.UTF-8",
)


class RepoSpec(BaseModel):
    """How to run one instance's tests."""

    model_config = ConfigDict(frozen=True)

    test_cmd: str
    """Test command; the test directives are appended, space-separated."""
    log_parser: str
    """Name in :data:`crf_prime.swe.logparse.PARSERS`."""
    install: str | None = None
    """Command re-run before the tests (the harness re-installs the package so compiled parts pick up the fix)."""
    eval_commands: tuple[str, ...] = ()
    """Shell lines run first (locale exports for some django versions)."""
    conda_env: str | None = "testbed"
    """Conda env activated in the sweb.eval image (None: no conda, e.g. local fixtures)."""
    junit: bool = True
    """pytest runs the tests (directly or under tox), so per-test outcomes come from its junit report, written
    outside the graded tree (:mod:`crf_prime.swe.report`); False (django, sympy): from the test output."""


def _astropy(version: str) -> RepoSpec:
    old = version in {"0.1", "0.2", "0.3", "0.4", "1.1", "1.2", "1.3"}
    return RepoSpec(
        test_cmd=ASTROPY_OLD if old else PYTEST,
        log_parser="pytest_v2",
        install="python -m pip install -e .[test] --verbose",
    )


def _django(version: str) -> RepoSpec:
    major = version.split(".")[0]
    if major in {"3"}:
        return RepoSpec(
            test_cmd=DJANGO, log_parser="django", install="python -m pip install -e .", eval_commands=_DJANGO_3_LOCALE
        )
    if major in {"4", "5"}:
        return RepoSpec(test_cmd=DJANGO, log_parser="django", install="python -m pip install -e .")
    if version in {"1.4", "1.5", "1.6"}:
        return RepoSpec(test_cmd=DJANGO, log_parser="django", install="python setup.py install")
    return RepoSpec(
        test_cmd=DJANGO_1_9 if version == "1.9" else DJANGO,
        log_parser="django",
        install="python setup.py install",
        eval_commands=_DJANGO_LOCALE,
    )


def _matplotlib(version: str) -> RepoSpec:
    if version in {"3.8", "3.9"}:
        install = 'python -m pip install --no-build-isolation -e ".[dev]"'
    elif version.startswith(("1.", "2.")):
        install = "python setup.py build; python setup.py install"
    else:
        install = "python -m pip install -e ."
    return RepoSpec(test_cmd=PYTEST, log_parser="matplotlib", install=install)


def _seaborn(version: str) -> RepoSpec:
    install = "python -m pip install -e ." if version == "0.11" else "python -m pip install -e .[dev]"
    return RepoSpec(test_cmd=SEABORN, log_parser="seaborn", install=install)


_FIXED: dict[str, RepoSpec] = {
    "pallets/flask": RepoSpec(test_cmd=PYTEST, log_parser="pytest", install="python -m pip install -e ."),
    "psf/requests": RepoSpec(test_cmd=PYTEST, log_parser="pytest_options", install="python -m pip install ."),
    "pydata/xarray": RepoSpec(test_cmd=PYTEST, log_parser="pytest", install="python -m pip install -e ."),
    "pylint-dev/pylint": RepoSpec(test_cmd=PYTEST, log_parser="pytest_options", install="python -m pip install -e ."),
    "pytest-dev/pytest": RepoSpec(test_cmd=PYTEST, log_parser="pytest", install="python -m pip install -e ."),
    "scikit-learn/scikit-learn": RepoSpec(
        test_cmd=PYTEST,
        log_parser="pytest_v2",
        install="python -m pip install -v --no-use-pep517 --no-build-isolation -e .",
    ),
    "sphinx-doc/sphinx": RepoSpec(test_cmd=SPHINX, log_parser="pytest_v2", install="python -m pip install -e .[test]"),
    "sympy/sympy": RepoSpec(test_cmd=SYMPY, log_parser="sympy", install="python -m pip install -e .", junit=False),
}

LITE_REPOS: tuple[str, ...] = (
    "astropy/astropy",
    "django/django",
    "matplotlib/matplotlib",
    "mwaskom/seaborn",
    *_FIXED,
)


class UnknownRepoError(InputError, KeyError):
    """No test command is known for an instance's repository."""

    def __str__(self) -> str:
        return str(self.args[0])


def repo_spec(instance: SweInstance) -> RepoSpec:
    """Test spec of ``instance``: its own ``test_cmd``/``log_parser`` columns, else the Lite repo table."""
    if instance.test_cmd is not None:
        return RepoSpec(
            test_cmd=instance.test_cmd,
            log_parser=instance.log_parser or "pytest",
            conda_env=None,
            junit="pytest" in instance.test_cmd,
        )
    repo, version = instance.repo, instance.version
    if repo == "astropy/astropy":
        spec = _astropy(version)
    elif repo == "django/django":
        spec = _django(version).model_copy(update={"junit": False})
    elif repo == "matplotlib/matplotlib":
        spec = _matplotlib(version)
    elif repo == "mwaskom/seaborn":
        spec = _seaborn(version)
    elif repo in _FIXED:
        spec = _FIXED[repo]
    else:
        raise UnknownRepoError(
            f"instance {instance.instance_id!r}: no test command known for repo {repo!r} (known: {', '.join(LITE_REPOS)}); "
            "add 'test_cmd' (and 'log_parser') columns to the row"
        )
    if instance.log_parser is not None:
        spec = spec.model_copy(update={"log_parser": instance.log_parser})
    return spec
