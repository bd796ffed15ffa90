"""feature-deletion: re-implement a deleted, tested feature of a real project (Cursor's Composer 2.5 recipe).

Exports the taskset and crf-prime's sandboxed harness, which makes it the taskset's default harness (every tool call
runs in the crf-prime sandbox on local runtimes). Data, task and config classes live in ``feature_deletion.taskset``.
"""

from crf_prime.harness import SandboxHarness
from feature_deletion.taskset import FeatureDeletionTaskset

__all__ = ["FeatureDeletionTaskset", "SandboxHarness"]
