"""The teacher pool of trace replay (channel 3: crf-prime's own addition, not part of Cursor's recipe).

Ask N frozen teacher models, behind OpenAI-compatible endpoints, for the next action at recorded agent states;
concurrent (asyncio or Ray), budget-capped and resumable through an append-only journal.

Names are imported lazily so that ``crf_prime.teachers.cli`` (and ``crf-prime --help``) does not pay for openai.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "AsyncioBackend": "backends",
    "RayBackend": "backends",
    "TeacherClient": "client",
    "BudgetConfig": "config",
    "ConfigError": "config",
    "PoolConfig": "config",
    "PoolOptions": "config",
    "TeacherConfig": "config",
    "load_pool_config": "config",
    "Journal": "journal",
    "JournalRecord": "crf_prime.records.journal",
    "read_journal": "crf_prime.records.journal",
    "Ledger": "ledger",
    "StateOutcome": "pool",
    "TeacherPool": "pool",
}

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

if TYPE_CHECKING:
    from crf_prime.records.journal import JournalRecord, read_journal
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
    from crf_prime.teachers.journal import Journal
    from crf_prime.teachers.ledger import Ledger
    from crf_prime.teachers.pool import StateOutcome, TeacherPool


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'crf_prime.teachers' has no attribute {name!r}")
    value = getattr(importlib.import_module(module if "." in module else f"crf_prime.teachers.{module}"), name)
    globals()[name] = value
    return value
