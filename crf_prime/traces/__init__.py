"""Agent-trace ingestion (channel 3, crf-prime's addition to Cursor's recipe)."""

from crf_prime.traces.family import model_family
from crf_prime.traces.ingest import (
    FormatSpec,
    detect_format,
    estimate_output,
    ingest,
    ingest_file,
    ingest_to_jsonl,
    read_states,
)
from crf_prime.traces.models import Action, Source, ToolCall, TraceFormat, TraceState
from crf_prime.traces.records import IngestError, IngestReport

__all__ = [
    "Action",
    "FormatSpec",
    "IngestError",
    "IngestReport",
    "Source",
    "ToolCall",
    "TraceFormat",
    "TraceState",
    "detect_format",
    "estimate_output",
    "ingest",
    "ingest_file",
    "ingest_to_jsonl",
    "model_family",
    "read_states",
]
