"""Run model-written commands isolated with bubblewrap, under limits, with a structured result.

``Sandbox(SandboxConfig(...)).run(argv, workdir=...)`` / ``await ...arun(...)``; ``probe()`` says whether isolation works here and
which limits are enforced. Running without isolation is an explicit opt-in (``SandboxConfig.unsandboxed``).
"""

from crf_prime.sandbox.box import Sandbox
from crf_prime.sandbox.models import RunResult, SandboxConfig, SandboxLimits, SandboxStatus, SandboxUnavailable
from crf_prime.sandbox.probe import BWRAP_ENV, probe, require

__all__ = [
    "BWRAP_ENV",
    "RunResult",
    "Sandbox",
    "SandboxConfig",
    "SandboxLimits",
    "SandboxStatus",
    "SandboxUnavailable",
    "probe",
    "require",
]
