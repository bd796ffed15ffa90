"""SWE-bench instances, test directives, log parsing and swebench-compatible grading.

Pure library code (no verifiers import): ``environments/swebench_lite`` builds the verifiers taskset on top.
Hugging Face loading needs the ``hf`` extra; the cross-check against swebench's own grader needs ``swebench``.
"""

from crf_prime.swe.dataset import LITE, DatasetNotFoundError, filter_instances, load_instances
from crf_prime.swe.directives import get_test_directives, is_test_path, patch_files
from crf_prime.swe.grading import GradeReport, LogResult, grade_instance_log, grade_log, read_log
from crf_prime.swe.instance import InstanceError, SweInstance, parse_instance
from crf_prime.swe.logparse import PARSERS, get_parser
from crf_prime.swe.specs import RepoSpec, UnknownRepoError, repo_spec

__all__ = [
    "LITE",
    "PARSERS",
    "DatasetNotFoundError",
    "GradeReport",
    "InstanceError",
    "LogResult",
    "RepoSpec",
    "SweInstance",
    "UnknownRepoError",
    "filter_instances",
    "get_parser",
    "get_test_directives",
    "grade_instance_log",
    "grade_log",
    "is_test_path",
    "load_instances",
    "parse_instance",
    "patch_files",
    "read_log",
    "repo_spec",
]
