"""Agent-trace ingestion (channel 3, crf-prime's addition to Cursor's recipe)."""

from crf_prime.traces.ingest import (
    FormatSpec,
    detect_format,
    estimate_output,
    ingest,
    ingest_file,
    ingest_to_jsonl,
)
from crf_prime.traces.records import IngestError, IngestReport

__all__ = [
    "FormatSpec",
    "IngestError",
    "IngestReport",
    "detect_format",
    "estimate_output",
    "ingest",
    "ingest_file",
    "ingest_to_jsonl",
]
