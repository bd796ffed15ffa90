"""``--help`` of every ``crf-prime`` command: one block per field, readable at 80 columns, with the effective default.

A field's default is read where the command takes it: a nested model's fields default to the values of the parent's
default instance (``featdel generate`` nests the grading limits, 300 s / 4096 MiB / 512 pids, not the bare
:class:`~crf_prime.sandbox.SandboxLimits` defaults), and its range comes from the field's constraints
(``Field(ge=1)``), so neither is written twice. Field help is the attribute docstring under the field, as in
verifiers and prime-rl configs.
"""

from __future__ import annotations

import ast
import enum
import inspect
import itertools
import re
import textwrap
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import annotated_types as at
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

WIDTH = 80
"""Columns the help is wrapped to: the width of a terminal and of a pipe's default."""

INDENT = "      "
"""Indent of a field's description under its flag line."""

NO_DEFAULT = object()
"""Marks a required field (no default)."""


@dataclass(frozen=True)
class Row:
    """One field of a command's help."""

    path: tuple[str, ...]
    """Attribute path from the command's config (``("limits", "wall_seconds")``)."""
    metavar: str
    """What the value looks like: INT, FLOAT, PATH, {a,b}, …"""
    doc: str
    default: Any
    """The effective default, or :data:`NO_DEFAULT` for a required field."""
    range: str
    """The accepted values beyond the type (``>= 1``), or empty."""

    @property
    def flag(self) -> str:
        return "--" + ".".join(p.replace("_", "-") for p in self.path)


def attribute_docs(cls: type) -> dict[str, str]:
    """The docstring under each field (``x: int = 1`` then ``\"\"\"…\"\"\"``), over the class and its bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, nxt in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


def _union_args(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _strip(annotation: Any) -> tuple[Any, list[Any]]:
    """``Annotated[T, m…]`` → ``(T, [m…])``."""
    if typing.get_origin(annotation) is typing.Annotated:
        inner, *meta = typing.get_args(annotation)
        return inner, meta
    return annotation, []


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The one model a field holds (``Model`` or ``Model | None``), else None."""
    models = [a for a in (_strip(x)[0] for x in _union_args(annotation)) if _is_model(a)]
    others = [a for a in _union_args(annotation) if a is not type(None) and not _is_model(_strip(a)[0])]
    return models[0] if len(models) == 1 and not others else None


def _item_model(annotation: Any) -> type[BaseModel] | None:
    """The model of ``list[Model]`` / ``tuple[Model, ...]`` (optionally ``| None``), else None."""
    for arg in _union_args(annotation):
        tp, _ = _strip(arg)
        items = [a for a in typing.get_args(tp) if a is not Ellipsis]
        if typing.get_origin(tp) in (list, tuple) and len(items) == 1 and _is_model(_strip(items[0])[0]):
            return _strip(items[0])[0]
    return None


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def metavar(annotation: Any) -> str:
    """INT, FLOAT, STR, PATH, BOOL, {a,b}, LIST, JSON; ``|None`` when None is accepted."""
    parts: list[str] = []
    for arg in _union_args(annotation):
        tp, _ = _strip(arg)
        if tp is type(None):
            continue
        origin = typing.get_origin(tp)
        if origin is Literal:
            parts.append("{" + ",".join(str(v) for v in typing.get_args(tp)) + "}")
        elif isinstance(tp, type) and issubclass(tp, enum.Enum):
            parts.append("{" + ",".join(str(m.value) for m in tp) + "}")
        elif tp is bool:
            parts.append("BOOL")
        elif isinstance(tp, type) and issubclass(tp, Path):
            parts.append("PATH")
        elif tp in (int, float, str):
            parts.append(tp.__name__.upper())
        elif origin in (list, tuple, set, frozenset) or tp in (list, tuple):
            parts.append("LIST")
        else:
            parts.append("JSON")
    text = "|".join(dict.fromkeys(parts)) or "NONE"
    return text + ("|None" if type(None) in _union_args(annotation) else "")


def value_range(field: Any) -> str:
    """The field's bounds (``>= 1``, ``> 0 and <= 1``, ``length >= 1``) from its constraints, else empty."""
    metas = list(field.metadata)
    for arg in _union_args(field.annotation):
        metas += _strip(arg)[1]
    bounds: list[str] = []
    for m in metas:
        for meta in getattr(m, "metadata", [m]):  # a FieldInfo inside Annotated carries its own metadata
            for attr, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
                value = getattr(meta, attr, None)
                if isinstance(meta, at.Interval | at.Gt | at.Ge | at.Lt | at.Le) and value is not None:
                    bounds.append(f"{op} {value}")
            if isinstance(meta, at.MinLen) and meta.min_length:
                bounds.append(f"length >= {meta.min_length}")
            if isinstance(meta, at.MaxLen) and meta.max_length is not None:
                bounds.append(f"length <= {meta.max_length}")
    return " and ".join(dict.fromkeys(bounds))


def rows(cls: type[BaseModel], defaults: BaseModel | None = None, prefix: tuple[str, ...] = ()) -> list[Row]:
    """Every leaf field of ``cls``, nested models flattened to dotted flags. ``defaults``: the instance whose values
    are the effective defaults (a parent's default for this nested model), else the fields' own defaults."""
    docs = attribute_docs(cls)
    out: list[Row] = []
    for name, field in cls.model_fields.items():
        if defaults is not None:
            default = getattr(defaults, name)
        elif field.default is not PydanticUndefined or field.default_factory is not None:
            default = field.get_default(call_default_factory=True)
        else:
            default = NO_DEFAULT
        sub = model_of(field.annotation)
        if sub is not None and (isinstance(default, BaseModel) or default is NO_DEFAULT):
            out += rows(sub, default if isinstance(default, BaseModel) else None, (*prefix, name))
            continue
        doc = (field.description or docs.get(name, "")).strip()
        item = _item_model(field.annotation)
        if item is not None:  # a list of tables: name their keys
            doc += f" Keys: {', '.join(item.model_fields)} (@ file or JSON)."
        if sub is not None:  # an optional table, off by default: any of its flags turns it on
            doc += f" Off unless one of its --{'.'.join((*prefix, name)).replace('_', '-')}.* flags is given."
        out.append(Row((*prefix, name), metavar(field.annotation), doc, default, value_range(field)))
        if sub is not None:
            out += rows(sub, None, (*prefix, name))
    return out


def show_default(value: Any) -> str:
    """How a default reads in help: paths and strings bare, enums by value, the rest as Python writes them."""
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, Path | str):
        return str(value) if str(value) else '""'
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return repr(value)


DEFAULT_NOTE = re.compile(r"\s*\((?:default|Default|None):? ([^()]*(?:\([^()]*\)[^()]*)*)\)|; default:? ([^;.]*)")


def split_default(doc: str) -> tuple[str, str]:
    """A doc's own note of what None means (``(default: the first)``) moved out of the text, so the help gives one
    default line: ``default: None (the first)``."""
    match = DEFAULT_NOTE.search(doc)
    if match is None:
        return doc, ""
    return (doc[: match.start()] + doc[match.end() :]).strip(), (match.group(1) or match.group(2) or "").strip()


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False)


def render(
    cls: type[BaseModel],
    prog: str,
    description: str,
    usage: str = "[@ FILE.toml] [--field VALUE ...]",
    prefix: str = "",
) -> str:
    """The help of a command taking ``cls``: usage, description, then each field's flag, help, default and range
    (``prefix``: the flags' own namespace, ``check`` for ``--check.base-dir``)."""
    lines = _wrap(f"usage: {prog} {usage}", "")
    for para in description.split("\n\n"):
        lines += ["", *_wrap(" ".join(para.split()), "")]
    lines += ["", "fields (a flag or a TOML key; nested tables as dotted flags):"]
    for row in rows(cls, prefix=(prefix,) if prefix else ()):
        head = f"{row.flag} / --no-{row.flag[2:]}" if row.metavar == "BOOL" else f"{row.flag} {row.metavar}"
        lines += ["", *_wrap(head, "  ")]
        doc, meaning = (
            split_default(row.doc.replace("``", "`")) if row.default is None else (row.doc.replace("``", "`"), "")
        )
        if doc:
            lines += _wrap(doc, INDENT)
        shown = show_default(row.default) + (f" ({meaning})" if meaning and row.default is None else "")
        facts = ["required"] if row.default is NO_DEFAULT else [f"default: {shown}"]
        if row.range:
            facts.append(f"range: {row.range}")
        lines += _wrap("; ".join(facts), INDENT)
    lines += ["", "-h, --help: this help. Exit codes: docs/cli.md."]
    return "\n".join(lines) + "\n"


def print_next(produced: str, steps: list[tuple[str, str]]) -> None:
    """A long-running command's last words: what it produced, then each next command (unwrapped, so it can be
    copied) with what it is for. An empty ``produced``: the command has said it already."""
    if produced:
        print(produced)
    if steps:
        print("next:")
    for command, why in steps:
        print(f"  {command}\n      {why}")
