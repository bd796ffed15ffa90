"""Test-log shapes of the Lite repos' runners, shared by the parser/grader tests and the swebench parity test.

``real_pytest_log`` runs a real pytest (this venv's) with ``-rA`` over a module that has every outcome; the other
samples reproduce the exact line shapes of the runners that cannot run here (django's runtests.py, sympy's
bin/test, astropy/sphinx pytest with colours and ``-vv`` classic lines).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

START, END = ">>>>> Start Test Output", ">>>>> End Test Output"

OUTCOMES_MODULE = """
import pytest


@pytest.fixture
def broken():
    raise RuntimeError("fixture exploded")


def test_pass():
    assert True


def test_fail():
    assert 1 + 1 == 3, "arithmetic is off"


def test_error(broken):
    pass


@pytest.mark.skip(reason="not today")
def test_skip():
    pass


@pytest.mark.xfail(reason="known bug")
def test_xfail():
    assert False


@pytest.mark.xfail(reason="fixed already")
def test_xpass():
    pass


@pytest.mark.parametrize("value", ["a b", "x-y", 3])
def test_param(value):
    assert value != 3
"""


def real_pytest_log(tmp: Path, *, exit_code_line: bool = True) -> tuple[str, int]:
    """Run pytest -rA on :data:`OUTCOMES_MODULE` in ``tmp``; return the framed log and pytest's exit code."""
    (tmp / "tests").mkdir(exist_ok=True)
    (tmp / "tests" / "test_outcomes.py").write_text(OUTCOMES_MODULE)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "-p", "no:asyncio", "tests/test_outcomes.py"],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = f"+ git apply -v -\nChecking patch tests/test_outcomes.py...\n{START}\n{proc.stdout}{proc.stderr}{END}\n"
    if exit_code_line:
        log += f">>>>> Test Exit Code: {proc.returncode}\n"
    return log, proc.returncode


DJANGO_LOG = f"""+ ./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 queries.tests
{START}
Testing against Django installed in '/testbed/django'
Importing application queries
Skipping setup of unused database(s): other.
Operations to perform:
  Synchronize unmigrated apps: auth, contenttypes, messages, queries, sessions, staticfiles
  Apply all migrations: admin, sites
Running migrations:
  Applying admin.0001_initial... OK
System check identified no issues (1 silenced).
test_exists (queries.tests.ExistsSql) ... ok
test_ticket_18414 (queries.tests.ExistsSql) ... ok
test_distinct_on (queries.tests.ExistsSql) ... skipped "Database doesn't support feature(s): can_distinct_on_fields"
test_ordering (queries.tests.Queries1Tests) ... FAIL
test_broken_query (queries.tests.Queries1Tests) ... ERROR
test_known_bug (queries.tests.Queries1Tests) ... expected failure
test_noisy (queries.tests.Queries1Tests) ... Creating table queries_note
ok
test_upper_ok (queries.tests.Queries2Tests) ... OK

======================================================================
ERROR: test_broken_query (queries.tests.Queries1Tests)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/testbed/tests/queries/tests.py", line 99, in test_broken_query
    Note.objects.filter(nope=1)
django.core.exceptions.FieldError: Cannot resolve keyword 'nope' into field.

======================================================================
FAIL: test_ordering (queries.tests.Queries1Tests)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/testbed/tests/queries/tests.py", line 42, in test_ordering
    self.assertEqual(1, 2)
AssertionError: 1 != 2

----------------------------------------------------------------------
Ran 8 tests in 0.112s

FAILED (failures=1, errors=1, skipped=1, expected failures=1)
Destroying test database for alias 'default' ('file:memorydb_default?mode=memory&cache=shared')...
{END}
>>>>> Test Exit Code: 1
"""

SYMPY_LOG = f"""{START}
============================= test process starts ==============================
executable:         /opt/miniconda3/envs/testbed/bin/python  (3.9.19-final-0) [CPython]
architecture:       64-bit
cache:              no
ground types:       python
numpy:              None
random seed:        37419218
hash randomization: on (PYTHONHASHSEED=3512683462)

sympy/core/tests/test_basic.py[4]
test__aresame ok
test_structure F
test_equality E
test_matches_basic ok                                                       [FAIL]


________________________________________________________________________________
_____________ sympy/core/tests/test_basic.py:test_structure ______________
Traceback (most recent call last):
  File "/testbed/sympy/core/tests/test_basic.py", line 40, in test_structure
    assert bool(b1)
AssertionError
________________________________________________________________________________
______________ sympy/core/tests/test_basic.py:test_equality ______________
Traceback (most recent call last):
  File "/testbed/sympy/core/tests/test_basic.py", line 55, in test_equality
    raise TypeError("boom")
TypeError: boom

====== tests finished: 2 passed, 1 failed, 1 exceptions, in 0.05 seconds =======
DO *NOT* COMMIT!
{END}
>>>>> Test Exit Code: 1
"""

# astropy (old versions: -vv classic lines), scikit-learn, sphinx (tox) -> parse_log_pytest_v2
PYTEST_V2_LOG = f"""{START}
============================= test session starts ==============================
collecting ... collected 5 items

astropy/io/fits/tests/test_header.py::TestHeaderFunctions::test_card_constructor_default_args PASSED
astropy/io/fits/tests/test_header.py::TestHeaderFunctions::test_fixable_non_fsc FAILED
astropy/io/fits/tests/test_header.py::TestHeaderFunctions::test_long_string_value_via_fromstring SKIPPED

=========================== short test summary info ============================
\x1b[32mPASSED\x1b[0m tests/test_build_html.py::test_html5_output[markup.html-expect0]
\x1b[32mPASSED\x1b[0m tests/test_ext_autodoc.py::test_format_signature[params with spaces]
\x1b[31mFAILED\x1b[0m tests/test_ext_autodoc.py::test_autodoc_typehints - AssertionError: assert 'int' in ''
\x1b[33mXFAIL\x1b[0m tests/test_ext_autodoc.py::test_known_gap
SKIPPED [2] tests/test_ext_math.py:30: imgmath is not installed
ERROR tests/test_ext_napoleon.py::test_setup - OSError: no docs
\x1b[31m========= 1 failed, 3 passed, 1 xfailed, 1 error in 0.53s =========\x1b[0m
{END}
>>>>> Test Exit Code: 1
"""

SEABORN_LOG = f"""{START}
tests/test_core.py::TestSemanticMapping::test_call_lookup PASSED         [ 20%]
tests/test_core.py::TestHueMapping::test_init_from_map FAILED            [ 40%]
tests/test_core.py::TestHueMapping::test_plotter_default_init PASSED     [ 60%]

=========================== short test summary info ============================
PASSED tests/test_core.py::TestSemanticMapping::test_call_lookup
PASSED tests/test_core.py::TestHueMapping::test_plotter_default_init
FAILED tests/test_core.py::TestHueMapping::test_init_from_map - KeyError: 'a'
{END}
>>>>> Test Exit Code: 1
"""

MATPLOTLIB_LOG = f"""{START}
=========================== short test summary info ============================
PASSED lib/matplotlib/tests/test_widgets.py::test_span_selector_drag[MouseButton.LEFT]
PASSED lib/matplotlib/tests/test_widgets.py::test_span_selector_drag[MouseButton.RIGHT]
FAILED lib/matplotlib/tests/test_widgets.py::test_rectangle_selector - ValueError: bad extents
SKIPPED [1] lib/matplotlib/tests/test_widgets.py:600: needs a display
{END}
>>>>> Test Exit Code: 1
"""

# requests / pylint -> parse_log_pytest_options (absolute-path parameters are cut to their last component)
PYTEST_OPTIONS_LOG = f"""{START}
=========================== short test summary info ============================
PASSED tests/test_requests.py::TestRequests::test_entry_points
PASSED tests/test_requests.py::test_unicode_url[/tmp/pytest-of-root/pytest-0/data/file.txt]
PASSED tests/test_requests.py::test_rel_url[//example.invalid/path]
FAILED tests/test_requests.py::TestRequests::test_HTTP_200_OK_GET_ALTERNATIVE - ConnectionError: refused
ERROR tests/test_requests.py::test_proxy_env - KeyError: 'HTTP_PROXY'
{END}
>>>>> Test Exit Code: 1
"""

# a conftest.py that rewrites every report to "passed" and prints fake summary lines, while pytest exits 1
FORGED_LOG = f"""{START}
=========================== short test summary info ============================
PASSED tests/test_stats.py::test_mean
PASSED tests/test_stats.py::test_median_even
{END}
>>>>> Test Exit Code: 1
"""
