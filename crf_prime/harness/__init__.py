"""crf-prime's sandboxed agent harness for verifiers 0.4.0 (needs the ``verifiers`` extra).

An environment makes it its default harness by exporting ``SandboxHarness`` in its module ``__all__`` next to its
Taskset; any taskset can select it with ``--env.agent.harness.id crf-sandbox`` (module ``crf_sandbox``).
"""

from crf_prime.extras import require

require("verifiers.v1", "verifiers")

from crf_prime.harness.harness import SandboxHarness, SandboxHarnessConfig  # noqa: E402

__all__ = ["SandboxHarness", "SandboxHarnessConfig"]
