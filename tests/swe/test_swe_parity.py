"""Opt-in cross-check against swebench itself, on swebench 4.1.0 (the version prime-rl's uv.lock holds) and 5.x.

The same logs go through swebench's own parsers and ``get_eval_report`` and through ours, and the status maps, test
lists and verdicts must be identical. Our grading follows swebench 5.x; 4.x grades with older rules, and
:data:`LEGACY_STATUS` / :data:`LEGACY_VERDICTS` list every place where 4.x answers differently on these logs, with its
exact answer: on 4.x the test requires that answer, so the lists are the complete, checked difference. On 4.x, whose
per-repo tables our Lite repo table (``specs.py``) and test directives (``directives.py``) reproduce, those are
compared too.

Enable with ``pip install 'crf-prime[swebench]'`` and ``CRF_TEST_SWEBENCH=1``. swebench is loaded as an installed
package (never vendored); importing its grading module pulls docker/datasets/modal client packages (no daemon).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from swe_log_samples import (
    DJANGO_LOG,
    END,
    FORGED_LOG,
    MATPLOTLIB_LOG,
    PYTEST_OPTIONS_LOG,
    PYTEST_V2_LOG,
    SEABORN_LOG,
    START,
    SYMPY_LOG,
    real_pytest_log,
)

from crf_prime.swe.directives import get_test_directives
from crf_prime.swe.fixture import build_mini_swebench
from crf_prime.swe.grading import grade_log
from crf_prime.swe.instance import SweInstance
from crf_prime.swe.logparse import ERROR, FAILED, PASSED, SKIPPED, get_parser
from crf_prime.swe.specs import LITE_REPOS, repo_spec

pytestmark = pytest.mark.swebench

T = "tests/test_outcomes.py::"
V2_SPACES = "tests/test_ext_autodoc.py::test_format_signature[params with spaces]"
V2_ERROR = "tests/test_ext_napoleon.py::test_setup"
FITS_SKIPPED = "astropy/io/fits/tests/test_header.py::TestHeaderFunctions::test_long_string_value_via_fromstring"
KNOWN_GAP = "tests/test_ext_autodoc.py::test_known_gap"
DISTINCT_ON = "test_distinct_on (queries.tests.ExistsSql)"  # skipped in DJANGO_LOG
TRUNCATED = "t.py::test_x[log(photon"

_REAL = "<real pytest -rA log, produced by the real_log fixture>"

# log name -> (parser, log)
LOGS: dict[str, tuple[str, str]] = {
    "pytest-real": ("pytest", _REAL),
    "pytest_v2": ("pytest_v2", PYTEST_V2_LOG),
    "pytest_options": ("pytest_options", PYTEST_OPTIONS_LOG),
    "django": ("django", DJANGO_LOG),
    "sympy": ("sympy", SYMPY_LOG),
    "seaborn": ("seaborn", SEABORN_LOG),
    "matplotlib": ("matplotlib", MATPLOTLIB_LOG),
    "forged": ("pytest", FORGED_LOG),
    "honest": ("pytest", FORGED_LOG.replace("Exit Code: 1", "Exit Code: 0")),
    "timed-out": ("pytest", f"{START}\nPASSED a.py::t\n{END}\n>>>>> Tests Timed Out\n"),
    "no-markers": ("pytest", "PASSED a.py::t\n"),
    "outside-markers": ("pytest", f"{START}\n{END}\nPASSED a.py::t\n"),
    "empty-region": ("pytest", f"{START}\nnothing\n{END}\n"),
    "truncated-id": (
        "pytest_v2",
        f"{START}\nPASSED t.py::test_x[log(photon) 1]\nPASSED t.py::test_x[log(photon) 2]\n{END}\n",
    ),
    "truncated-id-mixed": (
        "pytest_v2",
        f"{START}\nPASSED t.py::test_x[log(photon) 1]\nFAILED t.py::test_x[log(photon) 2]\n{END}\n",
    ),
    # the dataset's truncated ids come from a space inside the parameter: cut there, the id is the first token
    "truncated-in-param": (
        "pytest_v2",
        f"{START}\nPASSED t.py::test_x[log(photon cm)]\nPASSED t.py::test_x[log(photon s)]\n{END}\n",
    ),
    "truncated-in-param-mixed": (
        "pytest_v2",
        f"{START}\nFAILED t.py::test_x[log(photon cm)] - assert 0\nPASSED t.py::test_x[log(photon s)]\n{END}\n",
    ),
}

# (case, log name, FAIL_TO_PASS, PASS_TO_PASS)
CASES: list[tuple[str, str, list[str], list[str]]] = [
    ("pytest-resolved", "pytest-real", [f"{T}test_pass", f"{T}test_xfail"], [f"{T}test_param[x-y]"]),
    ("pytest-error-f2p", "pytest-real", [f"{T}test_error"], [f"{T}test_pass"]),
    ("pytest-missing-skip", "pytest-real", [f"{T}test_pass", f"{T}test_skip"], []),
    ("pytest-xpass-unrecorded", "pytest-real", [f"{T}test_pass"], [f"{T}test_xpass"]),
    ("pytest-space-id", "pytest-real", [f"{T}test_param[a"], [f"{T}test_param[a b]"]),
    ("pytest-partial", "pytest-real", [f"{T}test_pass", f"{T}test_fail"], [f"{T}test_pass"]),
    ("pytest-p2p-broken", "pytest-real", [f"{T}test_pass"], [f"{T}test_fail"]),
    ("v2-resolved", "pytest_v2", [V2_SPACES], [FITS_SKIPPED, KNOWN_GAP]),
    ("v2-failed", "pytest_v2", ["tests/test_ext_autodoc.py::test_autodoc_typehints"], []),
    ("v2-error-tail", "pytest_v2", [V2_ERROR], []),
    (
        "options",
        "pytest_options",
        ["tests/test_requests.py::test_unicode_url[/file.txt]"],
        ["tests/test_requests.py::test_rel_url[//example.invalid/path]"],
    ),
    ("options-error", "pytest_options", ["tests/test_requests.py::test_proxy_env"], []),
    (
        "django-partial",
        "django",
        ["test_noisy (queries.tests.Queries1Tests)", "test_ordering (queries.tests.Queries1Tests)"],
        [DISTINCT_ON],
    ),
    (
        "django-resolved",
        "django",
        ["test_upper_ok (queries.tests.Queries2Tests)", "test_noisy (queries.tests.Queries1Tests)"],
        ["test_exists (queries.tests.ExistsSql)", DISTINCT_ON],
    ),
    ("django-f2p-skipped", "django", [DISTINCT_ON], []),
    ("django-error", "django", ["test_broken_query (queries.tests.Queries1Tests)"], []),
    ("sympy-resolved", "sympy", ["test__aresame"], []),
    ("sympy-tagged-line", "sympy", ["test__aresame"], ["test_matches_basic"]),
    ("sympy-error", "sympy", ["test_equality"], ["test__aresame"]),
    (
        "seaborn",
        "seaborn",
        ["tests/test_core.py::TestHueMapping::test_plotter_default_init"],
        ["tests/test_core.py::TestSemanticMapping::test_call_lookup"],
    ),
    ("seaborn-failed", "seaborn", ["tests/test_core.py::TestHueMapping::test_init_from_map"], []),
    (
        "matplotlib",
        "matplotlib",
        ["lib/matplotlib/tests/test_widgets.py::test_span_selector_drag[1]"],
        ["lib/matplotlib/tests/test_widgets.py::test_span_selector_drag[3]"],
    ),
    ("forged", "forged", ["tests/test_stats.py::test_median_even"], ["tests/test_stats.py::test_mean"]),
    ("honest", "honest", ["tests/test_stats.py::test_median_even"], ["tests/test_stats.py::test_mean"]),
    ("timed-out", "timed-out", ["a.py::t"], []),
    ("no-markers", "no-markers", ["a.py::t"], []),
    ("outside-markers", "outside-markers", ["a.py::t"], []),
    ("empty-region", "empty-region", ["a.py::t"], []),
    ("truncated-id", "truncated-id", [TRUNCATED], []),
    ("truncated-id-mixed", "truncated-id-mixed", [TRUNCATED], []),
    ("truncated-in-param", "truncated-in-param", [TRUNCATED], []),
    ("truncated-in-param-mixed", "truncated-in-param-mixed", [TRUNCATED], []),
]

# Where swebench 4.x parses differently: log name -> {test id: (ours = 5.x, 4.x)}.
LEGACY_STATUS: dict[str, dict[str, tuple[str | None, str | None]]] = {
    # 4.x records pytest's grouped skip summary ``SKIPPED [N] file:line: reason`` as a test named ``[N]``
    "pytest-real": {"[1]": (None, SKIPPED)},
    "matplotlib": {"[1]": (None, SKIPPED)},
    # 4.x's pytest_v2 keeps only the first whitespace-separated token of a summary line's id, and 5.x joins the
    # tokens of an ERROR line (its `` - message`` included: an F2P id cannot match it in either version)
    "pytest_v2": {
        "[2]": (None, SKIPPED),
        V2_SPACES: (PASSED, None),
        "tests/test_ext_autodoc.py::test_format_signature[params": (None, PASSED),
        f"{V2_ERROR} - OSError: no docs": (ERROR, None),
        V2_ERROR: (None, ERROR),
    },
    "truncated-id": {
        "t.py::test_x[log(photon) 1]": (PASSED, None),
        "t.py::test_x[log(photon) 2]": (PASSED, None),
        "t.py::test_x[log(photon)": (None, PASSED),
    },
    "truncated-id-mixed": {
        "t.py::test_x[log(photon) 1]": (PASSED, None),
        "t.py::test_x[log(photon) 2]": (FAILED, None),
        "t.py::test_x[log(photon)": (None, FAILED),
    },
    "truncated-in-param": {
        "t.py::test_x[log(photon cm)]": (PASSED, None),
        "t.py::test_x[log(photon s)]": (PASSED, None),
        TRUNCATED: (None, PASSED),
    },
    "truncated-in-param-mixed": {
        "t.py::test_x[log(photon cm)]": (FAILED, None),
        "t.py::test_x[log(photon s)]": (PASSED, None),
        TRUNCATED: (None, PASSED),  # both lines land on the first-token id; the last one wins
    },
}

Verdict = tuple[Any, ...]
"""(found, resolved) and, when found, the F2P success / failure and P2P success / failure lists."""

# Where swebench 4.x grades differently: case -> 4.x's verdict (ours is 5.x's). Each is a rule 5.x added or fixed.
LEGACY_VERDICTS: dict[str, Verdict] = {
    # the id with spaces is only known under its first token, so the F2P test is missing; the SKIPPED P2P test is
    # in neither list (5.x: a skipped P2P test is maintained)
    "v2-resolved": (True, False, [], [V2_SPACES], [KNOWN_GAP], []),
    "django-partial": (
        True,
        False,
        ["test_noisy (queries.tests.Queries1Tests)"],
        ["test_ordering (queries.tests.Queries1Tests)"],
        [],
        [],
    ),
    "django-resolved": (
        True,
        True,
        ["test_upper_ok (queries.tests.Queries2Tests)", "test_noisy (queries.tests.Queries1Tests)"],
        [],
        ["test_exists (queries.tests.ExistsSql)"],
        [],
    ),
    # a SKIPPED F2P test is in neither list, so a patch that makes every F2P test skip resolves (5.x: a failure)
    "django-f2p-skipped": (True, True, [], [], [], []),
    # no exit-code check: PASSED lines a conftest.py prints while pytest exits 1 resolve (5.x: the log is rejected)
    "forged": (True, True, ["tests/test_stats.py::test_median_even"], [], ["tests/test_stats.py::test_mean"], []),
    # a log with no results and no sign that a suite ran is trusted (5.x: rejected); the verdict is the same
    "empty-region": (True, False, [], ["a.py::t"], [], []),
    # no prefix match for an id truncated inside ``[...]`` (5.x matches it when the candidates agree) ...
    "truncated-id": (True, False, [], [TRUNCATED], [], []),
    # ... and where the first token is the truncated id, the last line wins: a failing candidate before a passing
    # one resolves (5.x: candidates that disagree match nothing, a failure)
    "truncated-in-param-mixed": (True, True, [TRUNCATED], [], [], []),
}


@dataclass(frozen=True)
class Swebench:
    """The installed swebench's grading API, by public names only.

    5.x: ``PARSER_REGISTRY`` and ``swebench.types.TestSpec`` (the spec names its parser). 4.x (``legacy``): parsers
    live in ``log_parsers.python`` and ``get_eval_report`` finds the parser and test command by repo and version, so
    the spec names a real Lite repo whose parser is the one under test.
    """

    version: str
    legacy: bool

    def parse(self, parser: str, log: str) -> dict[str, str]:
        if self.legacy:
            from swebench.harness.log_parsers import python

            return getattr(python, f"parse_log_{parser}")(log, None)
        from swebench.harness.log_parsers import PARSER_REGISTRY

        return PARSER_REGISTRY[f"parse_log_{parser}"](log, None)

    def spec(self, name: str, parser: str, f2p: list[str], p2p: list[str], namespace: str | None = None) -> Any:
        if self.legacy:
            from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS
            from swebench.harness.log_parsers import MAP_REPO_TO_PARSER, python
            from swebench.harness.test_spec.test_spec import TestSpec as LegacyTestSpec

            parse = getattr(python, f"parse_log_{parser}")
            repo = next(repo for repo, fn in MAP_REPO_TO_PARSER.items() if fn is parse)
            return LegacyTestSpec(
                instance_id=name,
                repo=repo,
                version=next(iter(MAP_REPO_VERSION_TO_SPECS[repo])),
                repo_script_list=[],
                eval_script_list=[],
                env_script_list=[],
                arch="x86_64",
                FAIL_TO_PASS=f2p,
                PASS_TO_PASS=p2p,
                language="py",
                docker_specs={},
                namespace=namespace,
            )
        from swebench.types import TestSpec

        return TestSpec(
            instance_id=name,
            image="unused",
            eval_script_list=[],
            repo="owner/repo",
            version="0",
            FAIL_TO_PASS=f2p,
            PASS_TO_PASS=p2p,
            log_parser=f"parse_log_{parser}",
            eval_type="pass_and_fail",
        )

    def verdict(self, name: str, parser: str, log: str, f2p: list[str], p2p: list[str], tmp: Path) -> Verdict:
        from swebench.harness.grading import get_eval_report

        path = tmp / f"{name}.log"
        path.write_text(log)
        prediction = {"instance_id": name, "model_name_or_path": "crf-prime", "model_patch": "diff --git a/x b/x\n"}
        spec = self.spec(name, parser, f2p, p2p)
        report = get_eval_report(spec, prediction, str(path), include_tests_status=True)[name]
        if not report["patch_successfully_applied"]:
            return (False, report["resolved"])
        lists = report["tests_status"]
        f2p_lists, p2p_lists = lists["FAIL_TO_PASS"], lists["PASS_TO_PASS"]
        return (
            True,
            report["resolved"],
            *(f2p_lists[k] for k in ("success", "failure")),
            *(p2p_lists[k] for k in ("success", "failure")),
        )

    def image(self, instance_id: str, namespace: str) -> str:
        if self.legacy:
            return self.spec(instance_id, "pytest", [], [], namespace=namespace).instance_image_key
        from swebench.task.checks import expected_image

        return expected_image(instance_id, namespace=namespace)


@pytest.fixture(scope="module")
def swebench() -> Swebench:
    return Swebench(version=metadata.version("swebench"), legacy=importlib.util.find_spec("swebench.types") is None)


@pytest.fixture(scope="module")
def real_log(tmp_path_factory: pytest.TempPathFactory) -> str:
    return real_pytest_log(tmp_path_factory.mktemp("parity"))[0]


def _ours(name: str, parser: str, log: str, f2p: list[str], p2p: list[str]) -> Verdict:
    report = grade_log(name, log, parser, f2p, p2p)
    if not report.found:
        return (False, report.resolved)
    return (
        True,
        report.resolved,
        *(list(r) for r in (report.f2p_success, report.f2p_failure)),
        *(list(r) for r in (report.p2p_success, report.p2p_failure)),
    )


@pytest.mark.parametrize("log_name", list(LOGS))
def test_same_status_map_as_swebench(log_name: str, swebench: Swebench, real_log: str) -> None:
    parser, log = LOGS[log_name]
    log = real_log if log == _REAL else log
    ours, theirs = get_parser(parser)(log), swebench.parse(parser, log)
    differences = {k: (ours.get(k), theirs.get(k)) for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k)}
    assert differences == (LEGACY_STATUS.get(log_name, {}) if swebench.legacy else {}), swebench.version


@pytest.mark.parametrize(("name", "log_name", "f2p", "p2p"), CASES, ids=[c[0] for c in CASES])
def test_same_verdict_as_swebench(
    name: str, log_name: str, f2p: list[str], p2p: list[str], swebench: Swebench, real_log: str, tmp_path: Path
) -> None:
    parser, log = LOGS[log_name]
    log = real_log if log == _REAL else log
    ours = _ours(name, parser, log, f2p, p2p)
    theirs = swebench.verdict(name, parser, log, f2p, p2p, tmp_path)
    if swebench.legacy and name in LEGACY_VERDICTS:
        assert ours != LEGACY_VERDICTS[name], "no longer a difference: drop it from LEGACY_VERDICTS"
        assert theirs == LEGACY_VERDICTS[name], swebench.version
    else:
        assert ours == theirs, swebench.version


def test_legacy_lists_name_known_logs_and_cases() -> None:
    assert set(LEGACY_STATUS) <= set(LOGS)
    assert set(LEGACY_VERDICTS) <= {c[0] for c in CASES}
    assert len({c[0] for c in CASES}) == len(CASES)


def test_expected_image_name_matches_swebench(swebench: Swebench, tmp_path: Path) -> None:
    instance = build_mini_swebench(tmp_path)
    for namespace in ("swebench", "docker.io/swebench"):
        assert instance.image(namespace) == swebench.image(instance.instance_id, namespace)


def _lite_row(repo: str, version: str) -> SweInstance:
    return SweInstance.model_validate(
        {
            "instance_id": f"{repo.replace('/', '__')}-1",
            "repo": repo,
            "version": version,
            "base_commit": "0" * 40,
            "patch": "",
            "test_patch": "diff --git a/t.py b/t.py\n",
            "problem_statement": "",
            "FAIL_TO_PASS": ["t"],
            "PASS_TO_PASS": [],
        }
    )


def test_lite_repo_table_matches_swebench_4(swebench: Swebench) -> None:
    if not swebench.legacy:
        pytest.skip(f"swebench {swebench.version} keeps test commands in dataset columns, not per-repo tables")
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER

    compared = 0
    for repo in LITE_REPOS:
        for version, theirs in MAP_REPO_VERSION_TO_SPECS[repo].items():
            ours = repo_spec(_lite_row(repo, version))
            test_cmd = theirs["test_cmd"][-1] if isinstance(theirs["test_cmd"], list) else theirs["test_cmd"]
            parser = MAP_REPO_TO_PARSER[repo].__name__.removeprefix("parse_log_")
            assert (ours.test_cmd, ours.log_parser, ours.install, ours.eval_commands) == (
                test_cmd,
                parser,
                theirs.get("install"),
                tuple(theirs.get("eval_commands", ())),
            ), (repo, version)
            compared += 1
    assert compared >= len(LITE_REPOS)


TEST_PATCH = """diff --git a/tests/auth_tests/test_validators.py b/tests/auth_tests/test_validators.py
--- a/tests/auth_tests/test_validators.py
+++ b/tests/auth_tests/test_validators.py
diff --git a/tests/i18n/sampleproject/locale/fr/LC_MESSAGES/django.po b/tests/i18n/sampleproject/locale/fr/LC_MESSAGES/django.po
diff --git a/django/test/testcases.py b/django/test/testcases.py
diff --git a/tests/fixtures/data.json b/tests/fixtures/data.json
diff --git a/tests/data/table.csv b/tests/data/table.csv
diff --git a/tests/data/notes_csv b/tests/data/notes_csv
diff --git a/tests/data/notes.txt b/tests/data/notes.txt
diff --git a/tests/old name.py b/tests/new b/name.py
"""


@pytest.mark.parametrize("repo", ["django/django", "psf/requests"])
def test_test_directives_match_swebench_4(repo: str, swebench: Swebench) -> None:
    if not swebench.legacy:
        pytest.skip(f"swebench {swebench.version} dropped get_test_directives with the per-repo tables")
    from swebench.harness.test_spec.python import get_test_directives as theirs

    ours = get_test_directives(TEST_PATCH, repo)
    assert len(ours) == 4
    assert ours == theirs({"repo": repo, "test_patch": TEST_PATCH})
