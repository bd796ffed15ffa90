"""SWE-bench-lite taskset (id ``swebench-lite``) with crf-prime's sandboxed harness as its default harness."""

from crf_prime.harness import SandboxHarness
from swebench_lite.taskset import SweData, SweTask, SweTaskConfig, SweTaskset, SweTasksetConfig

__all__ = ["SandboxHarness", "SweData", "SweTask", "SweTaskConfig", "SweTaskset", "SweTasksetConfig"]
