"""The teacher pool of trace replay (channel 3: crf-prime's own addition, not part of Cursor's recipe).

Ask N frozen teacher models, behind OpenAI-compatible endpoints, for the next action at recorded agent states;
concurrent (asyncio or Ray), budget-capped and resumable through an append-only journal.
"""

from crf_prime.teachers.backends import AsyncioBackend, RayBackend
from crf_prime.teachers.client import TeacherClient
from crf_prime.teachers.config import (
    BudgetConfig,
    ConfigError,
    PoolConfig,
    PoolOptions,
    TeacherConfig,
    load_pool_config,
)
from crf_prime.teachers.journal import Journal, JournalRecord, read_journal
from crf_prime.teachers.ledger import Ledger
from crf_prime.teachers.pool import StateOutcome, TeacherPool

__all__ = [
    "AsyncioBackend",
    "BudgetConfig",
    "ConfigError",
    "Journal",
    "JournalRecord",
    "Ledger",
    "PoolConfig",
    "PoolOptions",
    "RayBackend",
    "StateOutcome",
    "TeacherClient",
    "TeacherConfig",
    "TeacherPool",
    "load_pool_config",
    "read_journal",
]
