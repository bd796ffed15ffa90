"""trace-replay: propose the next action at a recorded agent state; reward = agreement with the teacher consensus.

Channel 3 of crf-prime (trace replay) — crf-prime's own research addition, not part of Cursor's Composer recipe.
Exports the taskset and its default harness (one model call per task, in-process, with the state's tools).
"""

from trace_replay.harness import ReplayHarness, ReplayHarnessConfig
from trace_replay.taskset import (
    ReplayData,
    ReplayTask,
    ReplayTaskConfig,
    TraceReplayConfig,
    TraceReplayTaskset,
    Vote,
)

__all__ = ["ReplayHarness", "TraceReplayTaskset"]

# importable by name for configs and tests, but not exported: __all__ must hold exactly one Taskset and one Harness
_ = (ReplayData, ReplayHarnessConfig, ReplayTask, ReplayTaskConfig, TraceReplayConfig, Vote)
