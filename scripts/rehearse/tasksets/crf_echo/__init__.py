"""crf-echo: the rehearsal's learnable taskset (verifiers v1): repeat a short digit string from the prompt.

A task a 2-layer model can learn in a few dozen RL steps on a CPU, so the CPU rehearsal can show reward going up
under each policy objective (scripts/rehearse/learn.py). Rehearsal-only: it lives beside the rehearsal, on the env
servers' ``PYTHONPATH``, not among the shipped environments. Its harness is trace-replay's in-process one-call
harness (``[env.agent.harness] id = "trace-replay"``, ``offer_tools = false``).
"""

from crf_echo.taskset import EchoConfig, EchoData, EchoTask, EchoTaskset, echo_prompt, echo_strings

__all__ = ["EchoTaskset"]

# importable by name, not exported: __all__ must hold exactly one Taskset
_ = (EchoConfig, EchoData, EchoTask, echo_prompt, echo_strings)
