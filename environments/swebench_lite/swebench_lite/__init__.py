"""SWE-bench-lite taskset (id ``swebench-lite``) with crf-prime's sandboxed harness as its default harness."""

from swebench_lite.taskset import SweData, SweTask, SweTaskConfig, SweTaskset, SweTasksetConfig

__all__ = ["SweData", "SweTask", "SweTaskConfig", "SweTaskset", "SweTasksetConfig"]
