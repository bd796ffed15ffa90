"""feature-deletion: re-implement a deleted, tested feature of a real project (Cursor's Composer 2.5 recipe).

Exports the taskset and crf-prime's sandboxed harness (the taskset's default harness: every tool call runs in the
crf-prime sandbox on local runtimes).
"""

from crf_prime.harness import SandboxHarness
from feature_deletion.taskset import (
    FeatureDeletionConfig,
    FeatureDeletionData,
    FeatureDeletionTask,
    FeatureDeletionTaskConfig,
    FeatureDeletionTaskset,
)

__all__ = ["FeatureDeletionTaskset", "SandboxHarness"]

# importable by name for configs and tests, but not exported: __all__ must hold exactly one Taskset
_ = (FeatureDeletionConfig, FeatureDeletionData, FeatureDeletionTask, FeatureDeletionTaskConfig)
