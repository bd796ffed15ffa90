"""The rows every channel-3 stage shares: recorded states and actions, teacher requests, journal records.

This package sits below ``crf_prime.traces`` (which writes states), ``crf_prime.teachers`` (which reads states and
writes the journal) and ``crf_prime.pairs`` (which reads both); it imports none of them, so they never import each
other in a cycle.
"""

from crf_prime.records.family import model_family
from crf_prime.records.journal import JournalError, JournalRecord, read_journal
from crf_prime.records.models import Action, Source, TeacherRequest, ToolCall, TraceFormat, TraceState
from crf_prime.records.states import StatesFileError, count_states, read_states

__all__ = [
    "Action",
    "JournalError",
    "JournalRecord",
    "Source",
    "StatesFileError",
    "TeacherRequest",
    "ToolCall",
    "TraceFormat",
    "TraceState",
    "count_states",
    "model_family",
    "read_journal",
    "read_states",
]
