"""A real OpenAI-compatible HTTP server on 127.0.0.1 that plays scripted replies (for tests and offline demos)."""

from crf_prime.loopback.server import Billing, Charge, LoopbackOpenAI, Reply, ScriptExhausted

__all__ = ["Billing", "Charge", "LoopbackOpenAI", "Reply", "ScriptExhausted"]
