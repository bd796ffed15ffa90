"""Opt-in cross-check: the same logs through swebench's own parsers and ``get_eval_report`` give identical verdicts.

Enable with ``pip install 'crf-prime[swebench]'`` and ``CRF_TEST_SWEBENCH=1``. swebench is loaded as an installed
package (never vendored); importing its grading module pulls docker/datasets/modal client packages (no daemon).
"""

from __future__ import annotations

from pathlib import Path

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

from crf_prime.swe.fixture import build_mini_swebench
from crf_prime.swe.grading import grade_log
from crf_prime.swe.logparse import get_parser

pytestmark = pytest.mark.swebench

T = "tests/test_outcomes.py::"

_REAL = "<real pytest -rA log, produced by the real_log fixture>"

# (name, parser, log, FAIL_TO_PASS, PASS_TO_PASS)
CASES: list[tuple[str, str, str, list[str], list[str]]] = [
    ("pytest-resolved", "pytest", _REAL, [f"{T}test_pass", f"{T}test_xfail"], [f"{T}test_param[x-y]"]),
    ("pytest-error-f2p", "pytest", _REAL, [f"{T}test_error"], [f"{T}test_pass"]),
    ("pytest-missing-skip", "pytest", _REAL, [f"{T}test_pass", f"{T}test_skip"], []),
    ("pytest-xpass-unrecorded", "pytest", _REAL, [f"{T}test_pass"], [f"{T}test_xpass"]),
    ("pytest-space-id", "pytest", _REAL, [f"{T}test_param[a"], [f"{T}test_param[a b]"]),
    ("pytest-partial", "pytest", _REAL, [f"{T}test_pass", f"{T}test_fail"], [f"{T}test_pass"]),
    ("pytest-p2p-broken", "pytest", _REAL, [f"{T}test_pass"], [f"{T}test_fail"]),
    (
        "v2-resolved",
        "pytest_v2",
        PYTEST_V2_LOG,
        ["tests/test_ext_autodoc.py::test_format_signature[params with spaces]"],
        [
            "astropy/io/fits/tests/test_header.py::TestHeaderFunctions::test_long_string_value_via_fromstring",
            "tests/test_ext_autodoc.py::test_known_gap",
        ],
    ),
    ("v2-failed", "pytest_v2", PYTEST_V2_LOG, ["tests/test_ext_autodoc.py::test_autodoc_typehints"], []),
    ("v2-error-tail", "pytest_v2", PYTEST_V2_LOG, ["tests/test_ext_napoleon.py::test_setup"], []),
    (
        "options",
        "pytest_options",
        PYTEST_OPTIONS_LOG,
        ["tests/test_requests.py::test_unicode_url[/file.txt]"],
        ["tests/test_requests.py::test_rel_url[//example.invalid/path]"],
    ),
    ("options-error", "pytest_options", PYTEST_OPTIONS_LOG, ["tests/test_requests.py::test_proxy_env"], []),
    (
        "django-partial",
        "django",
        DJANGO_LOG,
        ["test_noisy (queries.tests.Queries1Tests)", "test_ordering (queries.tests.Queries1Tests)"],
        ["test_distinct_on (queries.tests.ExistsSql)"],
    ),
    (
        "django-resolved",
        "django",
        DJANGO_LOG,
        ["test_upper_ok (queries.tests.Queries2Tests)", "test_noisy (queries.tests.Queries1Tests)"],
        ["test_exists (queries.tests.ExistsSql)", "test_distinct_on (queries.tests.ExistsSql)"],
    ),
    ("django-error", "django", DJANGO_LOG, ["test_broken_query (queries.tests.Queries1Tests)"], []),
    ("sympy-resolved", "sympy", SYMPY_LOG, ["test__aresame"], []),
    ("sympy-tagged-line", "sympy", SYMPY_LOG, ["test__aresame"], ["test_matches_basic"]),
    ("sympy-error", "sympy", SYMPY_LOG, ["test_equality"], ["test__aresame"]),
    (
        "seaborn",
        "seaborn",
        SEABORN_LOG,
        ["tests/test_core.py::TestHueMapping::test_plotter_default_init"],
        ["tests/test_core.py::TestSemanticMapping::test_call_lookup"],
    ),
    ("seaborn-failed", "seaborn", SEABORN_LOG, ["tests/test_core.py::TestHueMapping::test_init_from_map"], []),
    (
        "matplotlib",
        "matplotlib",
        MATPLOTLIB_LOG,
        ["lib/matplotlib/tests/test_widgets.py::test_span_selector_drag[1]"],
        ["lib/matplotlib/tests/test_widgets.py::test_span_selector_drag[3]"],
    ),
    ("forged", "pytest", FORGED_LOG, ["tests/test_stats.py::test_median_even"], ["tests/test_stats.py::test_mean"]),
    (
        "honest",
        "pytest",
        FORGED_LOG.replace("Exit Code: 1", "Exit Code: 0"),
        ["tests/test_stats.py::test_median_even"],
        ["tests/test_stats.py::test_mean"],
    ),
    ("timed-out", "pytest", f"{START}\nPASSED a.py::t\n{END}\n>>>>> Tests Timed Out\n", ["a.py::t"], []),
    ("no-markers", "pytest", "PASSED a.py::t\n", ["a.py::t"], []),
    ("outside-markers", "pytest", f"{START}\n{END}\nPASSED a.py::t\n", ["a.py::t"], []),
    ("empty-region", "pytest", f"{START}\nnothing\n{END}\n", ["a.py::t"], []),
    (
        "truncated-id",
        "pytest_v2",
        f"{START}\nPASSED t.py::test_x[log(photon) 1]\nPASSED t.py::test_x[log(photon) 2]\n{END}\n",
        ["t.py::test_x[log(photon"],
        [],
    ),
    (
        "truncated-id-mixed",
        "pytest_v2",
        f"{START}\nPASSED t.py::test_x[log(photon) 1]\nFAILED t.py::test_x[log(photon) 2]\n{END}\n",
        ["t.py::test_x[log(photon"],
        [],
    ),
]


def _swebench_report(name: str, parser: str, log: str, f2p: list[str], p2p: list[str], tmp: Path) -> dict:
    from swebench.harness.grading import get_eval_report
    from swebench.types import TestSpec

    spec = TestSpec(
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
    path = tmp / f"{name}.log"
    path.write_text(log)
    prediction = {"instance_id": name, "model_name_or_path": "crf-prime", "model_patch": "diff --git a/x b/x\n"}
    return get_eval_report(spec, prediction, str(path), include_tests_status=True)[name]


@pytest.fixture(scope="module")
def real_log(tmp_path_factory: pytest.TempPathFactory) -> str:
    return real_pytest_log(tmp_path_factory.mktemp("parity"))[0]


@pytest.mark.parametrize(("name", "parser", "log", "f2p", "p2p"), CASES, ids=[c[0] for c in CASES])
def test_same_verdict_as_swebench(
    name: str, parser: str, log: str, f2p: list[str], p2p: list[str], real_log: str, tmp_path: Path
) -> None:
    from swebench.harness.log_parsers import PARSER_REGISTRY

    log = real_log if log == _REAL else log

    theirs = _swebench_report(name, parser, log, f2p, p2p, tmp_path)
    ours = grade_log(name, log, parser, f2p, p2p)
    assert ours.found == theirs["patch_successfully_applied"]
    assert ours.resolved == theirs["resolved"]
    if ours.found:
        status = theirs["tests_status"]
        assert list(ours.f2p_success) == status["FAIL_TO_PASS"]["success"]
        assert list(ours.f2p_failure) == status["FAIL_TO_PASS"]["failure"]
        assert list(ours.p2p_success) == status["PASS_TO_PASS"]["success"]
        assert list(ours.p2p_failure) == status["PASS_TO_PASS"]["failure"]
    assert get_parser(parser)(log) == PARSER_REGISTRY[f"parse_log_{parser}"](log, None)


def test_expected_image_name_matches_swebench(tmp_path: Path) -> None:
    from swebench.task.checks import expected_image

    instance = build_mini_swebench(tmp_path)
    assert instance.image("swebench") == expected_image(instance.instance_id)
    assert instance.image("docker.io/swebench") == expected_image(instance.instance_id, namespace="docker.io/swebench")
