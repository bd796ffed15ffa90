"""Typed ``[trainer.loss.kwargs]``: each objective declares a pydantic model; its loss validates ``**kwargs`` once.

prime-rl's ``CustomLossConfig.kwargs`` is an untyped dict and prime-pydantic-config passes CLI values of a mixed dict
as strings (``--trainer.loss.kwargs.clip-high 0.28`` arrives as ``'0.28'``). The model coerces such strings, rejects
unknown names and out-of-range values with an error naming the TOML key (``trainer.loss.kwargs.clip_hgih``), and
``crf-prime check`` runs the same validation before launch. Results are cached by the frozen kwargs, so the loss,
called once per sequence, pays a dictionary lookup, not a validation.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar, cast

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from crf_prime.errors import InputError
from loss_fns.types import LossInputs, LossOutputs

KWARGS_KEY = "trainer.loss.kwargs"
"""Where prime-rl's TOML keeps a custom loss's keyword arguments."""

ModelT = TypeVar("ModelT", bound="LossKwargs")


class LossKwargs(BaseModel):
    """Base of every objective's kwargs model: frozen, unknown names forbidden, CLI strings coerced (lax mode)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _none_string_is_none(cls, data: Any) -> Any:
        """``"None"`` means None, as in prime-pydantic-config (TOML has no null; ``--…kwargs.is-clip None``)."""
        if isinstance(data, dict):
            return {key: None if value == "None" else value for key, value in data.items()}
        return data


class LossKwargsError(InputError):
    """Invalid ``[trainer.loss.kwargs]``; the message names each offending TOML key.

    On crf-prime's error base (a ``ValueError`` too), so ``crf-prime check`` and prime-rl's trainer see the same
    error; ``crf_prime.errors`` imports nothing else, so the trainer process loads no crf-prime CLI code.
    """


def describe_errors(error: ValidationError, prefix: str, model: type[BaseModel]) -> str:
    """One line per pydantic error: ``<prefix>.<field>: <problem> (got <value>)``."""
    lines = []
    for item in error.errors():
        key = ".".join([prefix, *(str(part) for part in item["loc"])])
        nested = item.get("ctx", {}).get("error")
        if isinstance(nested, LossKwargsError):  # a sub-model's own report (composer's objective_kwargs)
            lines.append(str(nested))
        elif not item["loc"]:  # a check across fields
            lines.append(f"{key}: {item['msg']}")
        elif item["type"] == "extra_forbidden":
            allowed = ", ".join(model.model_fields)
            lines.append(f"{key}: unknown setting (allowed: {allowed})")
        else:
            lines.append(f"{key}: {item['msg']} (got {item['input']!r})")
    return "\n".join(lines)


def validate_kwargs(model: type[ModelT], kwargs: Mapping[str, Any], prefix: str = KWARGS_KEY) -> ModelT:
    """``model`` built from ``kwargs``, or :class:`LossKwargsError` naming every bad key under ``prefix``."""
    try:
        return model.model_validate(dict(kwargs))
    except ValidationError as error:
        raise LossKwargsError(describe_errors(error, prefix, model)) from None


_CACHE: dict[tuple[type[LossKwargs], str, Any], dict[str, Any]] = {}
_CACHE_SIZE = 1024


def _params(model: type[LossKwargs], kwargs: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    params = validate_kwargs(model, kwargs, prefix)
    return {name: getattr(params, name) for name in model.model_fields}


def _key(value: Any) -> Any:
    """A hashable image of kwargs that tells values of different types apart (1, 1.0 and True are equal keys but
    need not validate alike). Tables keep their order: prime-rl passes the same dict every call, so it repeats."""
    if isinstance(value, dict):
        return tuple([(name, _key(item)) for name, item in value.items()])
    if isinstance(value, list | tuple):
        return (value.__class__, *[_key(item) for item in value])
    return (value.__class__, value)


def resolve(model: type[LossKwargs], kwargs: Mapping[str, Any], prefix: str = KWARGS_KEY) -> dict[str, Any]:
    """Validated keyword arguments (defaults filled in) for one call; cached by the kwargs' values and types, so
    the once-per-sequence call pays a dictionary lookup.

    The returned dict is shared between calls with equal kwargs: callers must not mutate it.
    """
    key = (model, prefix, _key(kwargs))
    try:
        cached = _CACHE.get(key)
    except TypeError:  # an unhashable leaf (e.g. a set): validate without the cache
        return _params(model, kwargs, prefix)
    if cached is None:
        cached = _params(model, kwargs, prefix)
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.clear()
        _CACHE[key] = cached
    return cached


def kwargs_signature(model: type[LossKwargs]) -> inspect.Signature:
    """``(inputs, *, <field>=<default>, …) -> LossOutputs``: the signature a loss shows for its kwargs model."""
    params = [inspect.Parameter("inputs", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for name, field in model.model_fields.items():
        kind = inspect.Parameter.KEYWORD_ONLY
        params.append(inspect.Parameter(name, kind, default=field.get_default(), annotation=field.annotation))
    return inspect.Signature(params, return_annotation="LossOutputs")


class TypedLoss(Protocol):
    """A loss as prime-rl calls it, carrying the kwargs model that validates its ``[trainer.loss.kwargs]``."""

    kwargs_model: type[LossKwargs]
    __signature__: inspect.Signature

    def __call__(self, inputs: LossInputs, **kwargs: Any) -> LossOutputs: ...


def typed_kwargs(model: type[LossKwargs]) -> Callable[[Callable[..., LossOutputs]], TypedLoss]:
    """Wrap ``fn(inputs, **params)`` so its kwargs go through ``model`` first; the model stays at ``fn.kwargs_model``."""

    def wrap(fn: Callable[..., LossOutputs]) -> TypedLoss:
        @functools.wraps(fn)
        def loss_fn(inputs: LossInputs, **kwargs: Any) -> LossOutputs:
            return fn(inputs, **resolve(model, kwargs))

        typed = cast(TypedLoss, loss_fn)
        typed.kwargs_model = model
        typed.__signature__ = kwargs_signature(model)
        return typed

    return wrap
