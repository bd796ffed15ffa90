"""Agent-trace ingestion (channel 3, crf-prime's addition to Cursor's recipe)."""

from crf_prime.traces.models import Action, Source, ToolCall, TraceFormat, TraceState

__all__ = ["Action", "Source", "ToolCall", "TraceFormat", "TraceState"]
