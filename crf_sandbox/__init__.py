"""Harness id ``crf-sandbox``: ``--env.agent.harness.id crf-sandbox`` selects crf-prime's sandboxed harness.

verifiers 0.4.0 resolves a harness id by importing the module of that name (``-`` -> ``_``; see
``verifiers/v1/utils/loaders.py: _import_plugin``) and taking the one ``Harness`` subclass in its ``__all__``. A
dotted id such as ``crf_prime.harness`` cannot work there (the loader first looks it up under
``verifiers.v1.harnesses.``, which raises for a dotted name), hence this one-line top-level alias.
"""

from crf_prime.harness import SandboxHarness, SandboxHarnessConfig

__all__ = ["SandboxHarness", "SandboxHarnessConfig"]
