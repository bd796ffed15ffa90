"""Log parsers per Lite test-output style, and grading with swebench's rules (incl. forged output, error/skip/xfail)."""

from __future__ import annotations

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

from crf_prime.swe.grading import RESOLVED_FULL, RESOLVED_NO, RESOLVED_PARTIAL, grade_log, read_log
from crf_prime.swe.logparse import failure_messages, get_parser

T = "tests/test_outcomes.py::"


@pytest.fixture(scope="module")
def pytest_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    return real_pytest_log(tmp_path_factory.mktemp("outcomes"))


def test_real_pytest_ra_output(pytest_log: tuple[str, int]) -> None:
    log, rc = pytest_log
    assert rc == 1
    # a parametrize id with a space is cut at the space and XPASS / the grouped SKIPPED summary are not recorded:
    # both are swebench parse_log_pytest behaviours the dataset ids were produced with
    assert get_parser("pytest")(log) == {
        f"{T}test_pass": "PASSED",
        f"{T}test_param[a": "PASSED",
        f"{T}test_param[x-y]": "PASSED",
        f"{T}test_xfail": "XFAIL",
        f"{T}test_error": "ERROR",
        f"{T}test_fail": "FAILED",
        f"{T}test_param[3]": "FAILED",
    }


def test_real_pytest_grading_error_skip_xfail(pytest_log: tuple[str, int]) -> None:
    log, _ = pytest_log
    passing = grade_log("x", log, "pytest", [f"{T}test_pass", f"{T}test_xfail"], [f"{T}test_param[x-y]"])
    assert passing.found and passing.resolution == RESOLVED_FULL and passing.resolved
    # ERROR fails an F2P test; a test the log never names (the skipped one) fails too
    report = grade_log("x", log, "pytest", [f"{T}test_pass", f"{T}test_error", f"{T}test_skip"], [f"{T}test_fail"])
    assert report.f2p_success == (f"{T}test_pass",)
    assert report.f2p_failure == (f"{T}test_error", f"{T}test_skip")
    assert report.p2p_failure == (f"{T}test_fail",)
    assert report.resolution == RESOLVED_NO and not report.resolved
    assert report.f2p_fraction == pytest.approx(1 / 3) and report.p2p_fraction == 0.0
    assert report.exit_code == 1


def test_failure_messages_from_pytest_summary(pytest_log: tuple[str, int]) -> None:
    messages = failure_messages(pytest_log[0])
    assert messages[f"{T}test_fail"] == "AssertionError: arithmetic is off"
    assert messages[f"{T}test_error"] == "RuntimeError: fixture exploded"
    assert f"{T}test_pass" not in messages


def test_failure_messages_from_django_and_sympy_tracebacks() -> None:
    assert failure_messages(DJANGO_LOG) == {
        "test_broken_query (queries.tests.Queries1Tests)": (
            "django.core.exceptions.FieldError: Cannot resolve keyword 'nope' into field."
        ),
        "test_ordering (queries.tests.Queries1Tests)": "AssertionError: 1 != 2",
    }
    assert failure_messages(SYMPY_LOG) == {"test_structure": "AssertionError", "test_equality": "TypeError: boom"}


def test_pytest_v2_colours_spaces_and_verbose_lines() -> None:
    assert get_parser("pytest_v2")(PYTEST_V2_LOG) == {
        "astropy/io/fits/tests/test_header.py::TestHeaderFunctions::test_card_constructor_default_args": "PASSED",
        "astropy/io/fits/tests/test_header.py::TestHeaderFunctions::test_fixable_non_fsc": "FAILED",
        "astropy/io/fits/tests/test_header.py::TestHeaderFunctions::test_long_string_value_via_fromstring": "SKIPPED",
        "tests/test_build_html.py::test_html5_output[markup.html-expect0]": "PASSED",
        "tests/test_ext_autodoc.py::test_format_signature[params with spaces]": "PASSED",
        "tests/test_ext_autodoc.py::test_autodoc_typehints": "FAILED",
        "tests/test_ext_autodoc.py::test_known_gap": "XFAIL",
        # only FAILED lines lose their " - message" tail in this parser
        "tests/test_ext_napoleon.py::test_setup - OSError: no docs": "ERROR",
    }


def test_pytest_options_normalises_path_parameters() -> None:
    assert get_parser("parse_log_pytest_options")(PYTEST_OPTIONS_LOG) == {
        "tests/test_requests.py::TestRequests::test_entry_points": "PASSED",
        "tests/test_requests.py::test_unicode_url[/file.txt]": "PASSED",
        "tests/test_requests.py::test_rel_url[//example.invalid/path]": "PASSED",
        "tests/test_requests.py::TestRequests::test_HTTP_200_OK_GET_ALTERNATIVE": "FAILED",
        "tests/test_requests.py::test_proxy_env": "ERROR",
    }


def test_django_runner_output() -> None:
    assert get_parser("django")(DJANGO_LOG) == {
        "test_exists (queries.tests.ExistsSql)": "PASSED",
        "test_ticket_18414 (queries.tests.ExistsSql)": "PASSED",
        "test_distinct_on (queries.tests.ExistsSql)": "SKIPPED",
        "test_ordering (queries.tests.Queries1Tests)": "FAILED",
        "test_broken_query (queries.tests.Queries1Tests)": "ERROR",
        "test_noisy (queries.tests.Queries1Tests)": "PASSED",  # "ok" on the line after printed output
        "test_upper_ok (queries.tests.Queries2Tests)": "PASSED",
        "test_broken_query": "ERROR",  # the "ERROR: name (module.Class)" header records the bare name
        "test_ordering": "FAILED",
    }
    report = grade_log(
        "django__django-1",
        DJANGO_LOG,
        "django",
        ["test_ordering (queries.tests.Queries1Tests)", "test_noisy (queries.tests.Queries1Tests)"],
        ["test_exists (queries.tests.ExistsSql)", "test_distinct_on (queries.tests.ExistsSql)"],
    )
    # a skipped P2P test is maintained; the failing F2P test makes it partial -> not resolved
    assert report.p2p_success == ("test_exists (queries.tests.ExistsSql)", "test_distinct_on (queries.tests.ExistsSql)")
    assert report.f2p_failure == ("test_ordering (queries.tests.Queries1Tests)",)
    assert report.resolution == RESOLVED_PARTIAL and not report.resolved


def test_sympy_runner_output() -> None:
    assert get_parser("sympy")(SYMPY_LOG) == {
        "sympy/core/tests/test_basic.py:test_structure": "FAILED",
        "sympy/core/tests/test_basic.py:test_equality": "FAILED",
        "test__aresame": "PASSED",
        "test_structure": "FAILED",
        "test_equality": "ERROR",
        # test_matches_basic carries the file's "[FAIL]" tag on its line, so it is not recorded (upstream quirk)
    }
    report = grade_log("sympy__sympy-1", SYMPY_LOG, "sympy", ["test__aresame"], ["test_matches_basic"])
    assert report.p2p_failure == ("test_matches_basic",) and not report.resolved


def test_seaborn_and_matplotlib_styles() -> None:
    assert get_parser("seaborn")(SEABORN_LOG) == {
        "tests/test_core.py::TestSemanticMapping::test_call_lookup": "PASSED",
        "tests/test_core.py::TestHueMapping::test_init_from_map": "FAILED",
        "tests/test_core.py::TestHueMapping::test_plotter_default_init": "PASSED",
    }
    assert get_parser("matplotlib")(MATPLOTLIB_LOG) == {
        "lib/matplotlib/tests/test_widgets.py::test_span_selector_drag[1]": "PASSED",
        "lib/matplotlib/tests/test_widgets.py::test_span_selector_drag[3]": "PASSED",
        "lib/matplotlib/tests/test_widgets.py::test_rectangle_selector": "FAILED",
    }


def test_forged_output_is_not_a_pass() -> None:
    f2p, p2p = ["tests/test_stats.py::test_median_even"], ["tests/test_stats.py::test_mean"]
    report = grade_log("mini", FORGED_LOG, "pytest", f2p, p2p)
    assert not report.found and not report.resolved
    assert report.exit_code == 1 and "forged output" in report.reason
    assert report.f2p_failure == tuple(f2p) and report.f2p_fraction == 0.0
    # the same lines with exit code 0 are trusted
    honest = FORGED_LOG.replace("Test Exit Code: 1", "Test Exit Code: 0")
    assert grade_log("mini", honest, "pytest", f2p, p2p).resolved
    # a non-zero exit with a failure shown is a normal (trusted) failing run
    failing = FORGED_LOG.replace("PASSED tests/test_stats.py::test_mean", "FAILED tests/test_stats.py::test_mean - x")
    read = read_log(failing, "pytest")
    assert read.found and read.status["tests/test_stats.py::test_mean"] == "FAILED"


def test_untrusted_logs() -> None:
    body = "PASSED tests/a.py::t\n"
    assert read_log(body, "pytest").reason == "test output markers missing"
    timed_out = f"{START}\n{body}{END}\n>>>>> Tests Timed Out: after 5s\n"
    assert not read_log(timed_out, "pytest").found
    assert read_log(f"{START}\nnothing ran\n{END}\n", "pytest").reason == "no test results in the log"
    # results printed outside the markers are used when the framed region parses to nothing (swebench fallback)
    outside = f"{START}\n{END}\n{body}"
    assert read_log(outside, "pytest").status == {"tests/a.py::t": "PASSED"}


def test_truncated_parametrize_id_matches_by_prefix() -> None:
    log = f"{START}\nPASSED t.py::test_x[log(photon) 1]\nPASSED t.py::test_x[log(photon) 2]\n{END}\n"
    assert grade_log("i", log, "pytest_v2", ["t.py::test_x[log(photon"], []).resolved
    mixed = log.replace("PASSED t.py::test_x[log(photon) 2]", "FAILED t.py::test_x[log(photon) 2]")
    assert not grade_log("i", mixed, "pytest_v2", ["t.py::test_x[log(photon"], []).resolved


def test_unknown_parser_names_known_ones() -> None:
    with pytest.raises(KeyError, match=r"unknown log parser 'jest'.*django"):
        get_parser("jest")


def test_skipped_f2p_is_a_failure_but_skipped_p2p_is_kept() -> None:
    log = f"{START}\nPASSED a.py::t1\nSKIPPED a.py::t2\n{END}\n>>>>> Test Exit Code: 0\n"
    assert not grade_log("i", log, "pytest", ["a.py::t2"], ["a.py::t1"]).resolved
    assert grade_log("i", log, "pytest", ["a.py::t1"], ["a.py::t2"]).resolved
