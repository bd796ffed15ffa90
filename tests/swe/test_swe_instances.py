"""Instance rows, loading from local files, filtering, test directives, repo specs and the eval script."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crf_prime.swe.dataset import DatasetNotFoundError, load_instances
from crf_prime.swe.directives import get_test_directives, is_test_path, patch_files
from crf_prime.swe.evalscript import eval_script
from crf_prime.swe.fixture import FAIL_TO_PASS, INSTANCE_ID, PASS_TO_PASS, build_mini_swebench
from crf_prime.swe.instance import InstanceError, SweInstance, parse_instance
from crf_prime.swe.runner import drop_test_files, split_diff
from crf_prime.swe.specs import UnknownRepoError, repo_spec


def _row(**over: object) -> dict:
    row = {
        "repo": "django/django",
        "instance_id": "django__django-11099",
        "base_commit": "d26b2424437dabeeca94d7900b37d2df4410da0c",
        "patch": "diff --git a/django/x.py b/django/x.py\n",
        "test_patch": "diff --git a/tests/auth_tests/test_validators.py b/tests/auth_tests/test_validators.py\n",
        "problem_statement": "UsernameValidator allows trailing newline",
        "hints_text": None,
        "created_at": "2019-03-20T03:46:18Z",
        "version": "3.0",
        "FAIL_TO_PASS": '["test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"]',
        "PASS_TO_PASS": "[]",
        "environment_setup_commit": "419a78300f7cd27611196e1e464d50fd0385ff27",
    }
    row.update(over)
    return row


def test_row_decodes_json_lists_and_none_hints() -> None:
    inst = parse_instance(_row(), where="x:1")
    assert inst.FAIL_TO_PASS == ("test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)",)
    assert inst.PASS_TO_PASS == () and inst.hints_text == ""
    assert inst.image() == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    assert inst.image("") == "sweb.eval.x86_64.django__django-11099:latest"
    assert parse_instance(_row(FAIL_TO_PASS=["a"], PASS_TO_PASS=["b"]), where="x:1").PASS_TO_PASS == ("b",)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        (
            {"FAIL_TO_PASS": "[not json"},
            r"data/lite.jsonl:7 \(instance_id='django__django-11099'\): field FAIL_TO_PASS",
        ),
        ({"FAIL_TO_PASS": "[]"}, "field FAIL_TO_PASS: .*at least one test"),
        ({"PASS_TO_PASS": '{"a": 1}'}, "field PASS_TO_PASS: .*must encode a list"),
        ({"repo": "not a repo"}, "field repo"),
        ({"test_patch": ""}, "field test_patch"),
        ({"base_commit": None}, "field base_commit"),
    ],
)
def test_bad_rows_name_row_and_field(over: dict, message: str) -> None:
    with pytest.raises(InstanceError, match=message):
        parse_instance(_row(**over), where="data/lite.jsonl:7")


def test_missing_column_and_non_object_rows() -> None:
    row = _row()
    del row["problem_statement"]
    with pytest.raises(InstanceError, match=r"f.jsonl:2 .*field problem_statement: Field required"):
        parse_instance(row, where="f.jsonl:2")
    with pytest.raises(InstanceError, match=r"f.json\[0\]: row is a list"):
        parse_instance([1, 2], where="f.json[0]")  # type: ignore[arg-type]


def test_load_jsonl_json_and_filters(tmp_path: Path) -> None:
    rows = [_row(), _row(instance_id="psf__requests-2317", repo="psf/requests", version="2.4")]
    jsonl = tmp_path / "lite.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    as_json = tmp_path / "lite.json"
    as_json.write_text(json.dumps(rows))
    for source in (jsonl, as_json):
        assert [i.instance_id for i in load_instances(str(source))] == ["django__django-11099", "psf__requests-2317"]
    assert [i.instance_id for i in load_instances(str(jsonl), repos=["psf/requests"])] == ["psf__requests-2317"]
    picked = load_instances(str(jsonl), instance_ids=["psf__requests-2317", "django__django-11099"])
    assert [i.instance_id for i in picked] == ["psf__requests-2317", "django__django-11099"]
    with pytest.raises(InstanceError, match=r"instance ids not found: \['nope__nope-1'\]"):
        load_instances(str(jsonl), instance_ids=["nope__nope-1"])


def test_load_parquet(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow", reason="parquet loading needs pyarrow (crf-prime[hf])")
    import pyarrow.parquet as pq

    path = tmp_path / "test-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist([_row()]), path)
    (inst,) = load_instances(str(path))
    assert inst.instance_id == "django__django-11099" and inst.version == "3.0"


def test_bad_files_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match="does not exist"):
        load_instances(str(tmp_path / "missing.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(_row()) + "\n{oops\n")
    with pytest.raises(InstanceError, match=r"bad.jsonl:2: invalid JSON"):
        load_instances(str(bad))
    dup = tmp_path / "dup.jsonl"
    dup.write_text((json.dumps(_row()) + "\n") * 2)
    with pytest.raises(InstanceError, match="duplicate instance_id 'django__django-11099'"):
        load_instances(str(dup))
    bad_row = tmp_path / "badrow.jsonl"
    bad_row.write_text(json.dumps(_row()) + "\n" + json.dumps(_row(instance_id="b", FAIL_TO_PASS="x")) + "\n")
    with pytest.raises(InstanceError, match=r"badrow.jsonl:2 \(instance_id='b'\): field FAIL_TO_PASS"):
        load_instances(str(bad_row))


def test_hub_dataset_offline_or_without_the_hf_extra(tmp_path: Path) -> None:
    """A hub id that cannot be loaded is a clear error; no traffic leaves the machine (hub offline mode)."""
    code = (
        "from crf_prime.swe.dataset import load_instances\n"
        "try:\n    load_instances('princeton-nlp/SWE-bench_Lite', 'dev')\n"
        "except Exception as e:\n    print(type(e).__name__, e)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120).stdout
    if importlib.util.find_spec("datasets") is None:
        assert out.startswith("MissingExtraError") and "crf-prime[hf]" in out
    else:
        assert out.startswith("DatasetNotFoundError dataset 'princeton-nlp/SWE-bench_Lite' (split 'dev') could not")
        assert "pass a local .json/.jsonl/.parquet export instead" in out


DJANGO_TEST_PATCH = """diff --git a/tests/auth_tests/test_validators.py b/tests/auth_tests/test_validators.py
--- a/tests/auth_tests/test_validators.py
+++ b/tests/auth_tests/test_validators.py
diff --git a/tests/i18n/sampleproject/locale/fr/LC_MESSAGES/django.po b/tests/i18n/sampleproject/locale/fr/LC_MESSAGES/django.po
diff --git a/tests/forms_tests/field_tests/test_urlfield.py b/tests/forms_tests/field_tests/test_urlfield.py
diff --git a/tests/fixtures/data.json b/tests/fixtures/data.json
diff --git a/tests/data/table.csv b/tests/data/table.csv
diff --git a/tests/data/notes.txt b/tests/data/notes.txt
"""


def test_directives_pytest_and_django_dotted_form() -> None:
    assert get_test_directives(DJANGO_TEST_PATCH, "django/django") == [
        "auth_tests.test_validators",
        "i18n.sampleproject.locale.fr.LC_MESSAGES.django.po",
        "forms_tests.field_tests.test_urlfield",
    ]
    assert get_test_directives(DJANGO_TEST_PATCH, "psf/requests") == [
        "tests/auth_tests/test_validators.py",
        "tests/i18n/sampleproject/locale/fr/LC_MESSAGES/django.po",
        "tests/forms_tests/field_tests/test_urlfield.py",
    ]
    assert patch_files(DJANGO_TEST_PATCH)[-1] == "tests/data/notes.txt"


@pytest.mark.parametrize(
    ("path", "is_test"),
    [
        ("tests/test_x.py", True),
        ("sklearn/linear_model/tests/test_ridge.py", True),
        ("testing/python/collect.py", True),
        ("conftest.py", True),
        ("src/pkg/conftest.py", True),
        ("django/contrib/auth/tests.py", True),
        ("pkg/util_test.py", True),
        ("src/_pytest/python.py", False),
        ("sympy/core/basic.py", False),
        ("django/test/utils.py", False),
        ("docs/testing.rst", False),
    ],
)
def test_test_path_rule(path: str, is_test: bool) -> None:
    assert is_test_path(path) is is_test


def test_drop_test_files_keeps_source_chunks() -> None:
    diff = (
        "diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-a\n+b\n"
        "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+x\n"
        "diff --git a/setup.cfg b/setup.cfg\n--- a/setup.cfg\n+++ b/setup.cfg\n@@ -1 +1 @@\n-c\n+d\n"
    )
    assert len(split_diff(diff)) == 3 and split_diff("") == []
    kept = drop_test_files(diff, also={"setup.cfg"})
    assert kept == diff.split("diff --git a/conftest.py")[0]


def test_repo_specs_for_lite_repos() -> None:
    django = parse_instance(_row(), where="r")
    spec = repo_spec(django)
    assert spec.test_cmd == "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
    assert spec.log_parser == "django" and spec.eval_commands[0].startswith("sed -i")
    assert repo_spec(parse_instance(_row(version="1.9"), where="r")).test_cmd == "./tests/runtests.py --verbosity 2"
    astropy = parse_instance(
        _row(repo="astropy/astropy", instance_id="astropy__astropy-12907", version="4.3"), where="r"
    )
    assert (repo_spec(astropy).test_cmd, repo_spec(astropy).log_parser) == ("pytest -rA", "pytest_v2")
    old = parse_instance(_row(repo="astropy/astropy", instance_id="astropy__astropy-6938", version="1.3"), where="r")
    assert repo_spec(old).test_cmd == "pytest -rA -vv -o console_output_style=classic --tb=no"
    sympy = parse_instance(_row(repo="sympy/sympy", instance_id="sympy__sympy-1", version="1.1"), where="r")
    assert repo_spec(sympy).log_parser == "sympy" and "bin/test -C --verbose" in repo_spec(sympy).test_cmd
    with pytest.raises(UnknownRepoError, match=r"no test command known for repo 'acme/widgets'.*test_cmd"):
        repo_spec(parse_instance(_row(repo="acme/widgets", instance_id="acme__widgets-1"), where="r"))


def test_eval_script_prepares_on_stderr_and_execs_the_test_command() -> None:
    inst = parse_instance(_row(test_patch=DJANGO_TEST_PATCH), where="r")
    script = eval_script(inst, repo_dir="/testbed")
    assert script.splitlines() == [
        "#!/bin/bash",
        "set -uo pipefail",
        "exec 3>&1 1>&2",
        "cd /testbed",
        "source /opt/miniconda3/bin/activate",
        "conda activate testbed",
        "sed -i '/en_US.UTF-8/s/^# //g' /etc/locale.gen && locale-gen",
        "export LANG=en_US.UTF-8",
        "export LANGUAGE=en_US:en",
        "export LC_ALL=en_US.UTF-8",
        "python -m pip install -e .",
        "exec 1>&3 3>&- 2>&1",
        "exec ./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 auth_tests.test_validators "
        "i18n.sampleproject.locale.fr.LC_MESSAGES.django.po forms_tests.field_tests.test_urlfield",
    ]
    assert ">>>>>" not in script  # the grader frames the log itself
    assert "pip install" not in eval_script(inst, repo_dir="/testbed", reinstall=False)


def test_mini_fixture_is_a_swebench_row(tmp_path: Path) -> None:
    inst = build_mini_swebench(tmp_path)
    (loaded,) = load_instances(str(tmp_path / "instances.jsonl"))
    assert loaded == inst and isinstance(inst, SweInstance)
    assert inst.instance_id == INSTANCE_ID
    assert list(inst.FAIL_TO_PASS) == FAIL_TO_PASS and list(inst.PASS_TO_PASS) == PASS_TO_PASS
    assert patch_files(inst.patch) == ["ministats/stats.py"]
    assert get_test_directives(inst.test_patch, inst.repo) == ["tests/test_stats.py"]
    raw = json.loads((tmp_path / "instances.jsonl").read_text())
    assert isinstance(raw["FAIL_TO_PASS"], str)  # JSON-encoded, as in the published parquet
