"""Channel 2 hints: error-site detection over an episode and the hint prime-rl's ``opsd`` reads from ``trace.info``.

Channel 2 (targeted self-distillation with a hint at the error site) is part of Cursor's Composer 2.5 recipe; the
detectors, templates and the optional LLM-written hint are crf-prime's implementation of it.
"""

from crf_prime.hints.attach import HINT_KEY, SITES_KEY, TURNS_KEY, analyse, attach_hint, build_hint
from crf_prime.hints.llm import LLMHintWriter, attach_hint_async, hint_writer
from crf_prime.hints.models import ErrorKind, ErrorSite, HintTarget, HintTaskConfig, HintWriterConfig
from crf_prime.hints.target import error_turns, keep_turns
from crf_prime.records.failing import FailingTest

__all__ = [
    "HINT_KEY",
    "SITES_KEY",
    "TURNS_KEY",
    "ErrorKind",
    "ErrorSite",
    "FailingTest",
    "HintTarget",
    "HintTaskConfig",
    "HintWriterConfig",
    "LLMHintWriter",
    "analyse",
    "attach_hint",
    "attach_hint_async",
    "build_hint",
    "error_turns",
    "hint_writer",
    "keep_turns",
]
