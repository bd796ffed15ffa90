"""Teacher pool configuration: which OpenAI-compatible models to ask, what they cost, how hard to push them.

Loaded from a TOML file (``configs/teachers.toml``) with ``[[teachers]]`` tables plus optional ``[budget]`` and
``[pool]`` tables. Prices are the fallback cost source when the API does not return ``usage.cost`` (OpenRouter
does; vLLM and OpenAI do not).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from crf_prime.errors import CrfError, ExitCode, InputError
from crf_prime.pairs.build import AgreementConfig


class ConfigError(InputError):
    """A teacher config file or field is invalid; the message names the file and the field."""


class UnpricedCap(CrfError):
    """A spend cap over a teacher without prices (:func:`check_priced`), found while a :class:`PoolConfig` is parsed.

    Not a ``ValueError``, so pydantic lets it through as it is: the message names the teacher's price fields rather
    than pydantic's summary of the whole model; the command line handles it as bad input (exit 2)."""

    exit_code = ExitCode.BAD_INPUT


class Sampling(BaseModel):
    """Sampling parameters sent with every request of a teacher."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float = 0.0
    """Sampling temperature; votes want near-greedy answers."""
    top_p: float | None = None
    """Nucleus sampling mass, or None to leave the provider default."""
    max_tokens: int = 2048
    """Upper bound on generated tokens per request; with the output price it bounds what a call can cost."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Provider-specific request fields (e.g. OpenRouter ``provider`` routing, ``reasoning``)."""

    @field_validator("max_tokens")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be >= 1 (a call's worst-case cost must be finite)")
        return v


class TeacherConfig(BaseModel):
    """One frozen teacher model behind an OpenAI-compatible chat-completions endpoint."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """Short unique name used in the journal and the report."""
    model: str
    """Model id sent in the request (e.g. ``deepseek/deepseek-chat-v3.1`` on OpenRouter)."""
    base_url: str
    """Endpoint root including ``/v1`` (e.g. ``https://openrouter.ai/api/v1``)."""
    api_key_var: str = "OPENROUTER_API_KEY"
    """Environment variable holding the API key; empty string means no key (local vLLM: ``EMPTY``)."""
    model_family: str = ""
    """Model family (e.g. ``anthropic``, ``openai``, ``qwen``); teachers of a trace's own family are excluded."""
    price_in_per_mtok: float = 0.0
    """USD per 1M input tokens, used when the response has no ``usage.cost``."""
    price_out_per_mtok: float = 0.0
    """USD per 1M output tokens, used when the response has no ``usage.cost``."""
    max_concurrency: int = 8
    """Requests of this teacher in flight at once (the provider rate cap)."""
    timeout_s: float = 120.0
    """Per-attempt timeout in seconds (whole response, streaming included)."""
    max_attempts: int = 4
    """HTTP attempts per call (1 + retries on 408/409/429/5xx/timeouts/connection errors)."""
    max_retry_after_s: float = 60.0
    """A ``Retry-After`` longer than this (seconds) is not waited for: the call fails instead."""
    stream: bool = False
    """Ask for a streamed (SSE) response; usage comes from the final chunk."""
    tier: int = 0
    """Tiered querying: lower tiers are asked first; higher tiers only when the lower ones disagree."""
    reserve_prompt_overhead_tokens: int = 1024
    """Tokens the provider's chat template may add to a request's bytes (role markers, tool-use instructions); part
    of the worst case reserved against the caps before a call is sent."""
    cost_lookup: Literal["auto", "openrouter", "none"] = "auto"
    """How a call whose cost is unknown (a cut or unreadable answer that carries the provider's generation id) is
    resolved: "openrouter" asks ``GET {base_url}/generation?id=...`` for its ``total_cost``; "auto" does so when
    ``base_url`` is OpenRouter's; "none" keeps it unresolved (booked at its worst case)."""
    idempotency_header: str = ""
    """Request header the endpoint takes an idempotency key in (e.g. ``Idempotency-Key``): a request repeated with
    the same key is answered without a second charge, so a call in flight at a crash is re-sent with its key on
    resume instead of booked as possibly paid. Empty: the endpoint takes none (OpenAI, OpenRouter)."""
    sampling: Sampling = Field(default_factory=Sampling)

    @field_validator("max_concurrency", "max_attempts")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be >= 1")
        return v

    @field_validator(
        "timeout_s", "price_in_per_mtok", "price_out_per_mtok", "max_retry_after_s", "reserve_prompt_overhead_tokens"
    )
    @classmethod
    def _non_negative(cls, v: float) -> float:
        if v < 0:
            raise ValueError("must be >= 0")
        return v

    def api_key(self) -> str:
        """The API key from ``api_key_var`` ("EMPTY" when no variable is configured)."""
        if not self.api_key_var:
            return "EMPTY"
        key = os.environ.get(self.api_key_var)
        if not key:
            raise ConfigError(
                f"teacher {self.name!r}: environment variable {self.api_key_var} (teachers.api_key_var) is not set"
            )
        return key

    def price_cost(self, input_tokens: int, output_tokens: int) -> float:
        """Cost in USD from the price table."""
        return (input_tokens * self.price_in_per_mtok + output_tokens * self.price_out_per_mtok) / 1e6

    @property
    def looks_up_costs(self) -> bool:
        """Whether unknown costs are resolved through OpenRouter's generation lookup (see ``cost_lookup``)."""
        if self.cost_lookup == "auto":
            return "openrouter.ai" in self.base_url
        return self.cost_lookup == "openrouter"

    @property
    def priced(self) -> bool:
        return self.price_in_per_mtok > 0 or self.price_out_per_mtok > 0


class BudgetConfig(BaseModel):
    """Hard spend caps (USD). None = no cap. The job cap covers every run that shares one journal."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_usd: float | None = None
    """Cap for the whole job (all runs on one journal)."""
    per_trace_usd: float | None = None
    """Cap per trace (states sharing ``source.trace_id``)."""

    @field_validator("job_usd", "per_trace_usd")
    @classmethod
    def _non_negative(cls, v: float | None) -> float | None:
        if v is not None and v < 0:
            raise ValueError("must be >= 0")
        return v

    @property
    def capped(self) -> bool:
        return self.job_usd is not None or self.per_trace_usd is not None


def check_priced(
    teachers: Sequence[TeacherConfig], budget: BudgetConfig, positions: Sequence[int] | None = None
) -> None:
    """A spend cap needs every teacher's prices: a call is sent only when its worst case at those prices fits.

    Raises :class:`ConfigError` naming the teacher's price fields (found at launch, before anything is sent);
    ``positions`` are the teachers' indices in their file when ``teachers`` is a subset of it.
    """
    if not budget.capped:
        return
    for i, t in zip(positions or range(len(teachers)), teachers, strict=True):
        if not t.priced:
            raise ConfigError(
                f"teachers[{i} name={t.name!r}].price_in_per_mtok / price_out_per_mtok: a spend cap ([budget] or "
                f"--budget.job-usd / --budget.per-trace-usd) needs the teacher's prices, to reserve each call's worst case "
                f"before it is sent; both are 0"
            )


class PoolOptions(BaseModel):
    """How the pool schedules calls."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    votes: AgreementConfig = AgreementConfig()
    """The part of the votes the pool reads: ``exclude_same_family`` (do not ask teachers of the trace's own model
    family; the report lists the exclusions), and ``tier`` / ``text_similarity`` (tiered querying: what counts as
    agreement). A consensus (``threshold``, ``min_support``, ``min_teachers``) is the pair builder's and the
    trace_replay environment's setting, refused here."""
    tiered: bool = False
    """Ask low tiers first; escalate a state only on disagreement among them or with the student."""
    window: Annotated[int, Field(ge=1)] | None = None
    """States in flight at once (driver-side backpressure); default 2 x the sum over teachers of their concurrency
    plus their ``queue``."""
    queue: Annotated[int, Field(ge=0)] | None = None
    """Calls per teacher admitted beyond its ``max_concurrency``; they wait for a slot in the teacher's client (in
    its actor, on Ray), which starts the next request the moment one finishes: the admission of a call (its
    durable call-log row) and, on Ray, the driver-actor round trip happen while it waits, not while a provider slot
    sits idle. Default ``max(2, max_concurrency // 2)``; 0: admit only what can be sent at once. A queued call is
    reserved against the caps (on Ray it counts as sent from its admission: lost with its actor, it is possibly
    paid)."""
    retry_failed: bool = True
    """On resume, ask again where the journal only holds failed calls (except possibly paid ones: ``resend_lost``)."""
    resend_lost: bool = False
    """Ask again where a call may have been paid without an answer: in flight when a previous run died, timed out,
    cut off, or lost with a Ray actor (it may be paid twice)."""


class PoolConfig(BaseModel):
    """A whole ``teachers.toml``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    teachers: tuple[TeacherConfig, ...]
    """The ``[[teachers]]`` tables: one per teacher model (names unique)."""
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    """The ``[budget]`` table: hard spend caps."""
    pool: PoolOptions = Field(default_factory=PoolOptions)
    """The ``[pool]`` table: scheduling and the votes the answers feed."""

    @model_validator(mode="after")
    def _unique_names(self) -> PoolConfig:
        if not self.teachers:
            raise ValueError("at least one [[teachers]] table is required")
        names = [t.name for t in self.teachers]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"teacher names must be unique; repeated: {', '.join(dup)}")
        return self

    @model_validator(mode="after")
    def _caps_have_prices(self) -> PoolConfig:
        """A spend cap needs every teacher's prices (:func:`check_priced`), checked once, when the config is parsed."""
        try:
            check_priced(self.teachers, self.budget)
        except ConfigError as e:
            raise UnpricedCap(str(e)) from None
        return self


def _field_path(loc: tuple[Any, ...], data: dict[str, Any]) -> str:
    parts: list[str] = []
    node: Any = data
    for item in loc:
        if isinstance(item, int) and isinstance(node, list | tuple):
            name = node[item].get("name") if item < len(node) and isinstance(node[item], dict) else None
            parts[-1] = f"{parts[-1]}[{item}{f' name={name!r}' if name else ''}]"
            node = node[item] if item < len(node) else None
        else:
            parts.append(str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return ".".join(parts)


def load_pool_config(path: str | Path) -> PoolConfig:
    """Read a ``teachers.toml``; errors name the file and the field (or the TOML line)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: teacher config file not found") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None
    try:
        config = PoolConfig.model_validate(data)
    except ValidationError as e:
        lines = [f"{path}: invalid teacher config"]
        for err in e.errors():
            where = _field_path(tuple(err["loc"]), data) or "(top level)"
            lines.append(f"  {where}: {err['msg']}")
        raise ConfigError("\n".join(lines)) from None
    except UnpricedCap as e:
        raise ConfigError(f"{path}: {e}") from None
    return config
