"""One SWE-bench task instance (a dataset row), validated at the edge.

Column names and encodings follow the SWE-bench / SWE-bench_Lite datasets (``princeton-nlp/SWE-bench_Lite``):
``FAIL_TO_PASS`` / ``PASS_TO_PASS`` are JSON-encoded lists of test ids in the published parquet, plain lists in
locally written JSON. Two optional columns let a custom (non-Lite) instance say how it is tested: ``test_cmd`` and
``log_parser`` (the swebench 5.x dataset rows carry ``log_parser`` too).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from crf_prime.errors import InputError


class InstanceError(InputError):
    """A dataset row is not a valid SWE-bench instance; the message names the row and the field."""


class SweInstance(BaseModel):
    """A SWE-bench instance: a repository snapshot, an issue, the gold fix and the tests that judge a fix."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    instance_id: str = Field(min_length=1)
    """Durable id ``owner__repo-PR``, e.g. ``django__django-11099``."""
    repo: str = Field(pattern=r"^[^/\s]+/[^/\s]+$")
    """GitHub ``owner/name`` of the repository."""
    base_commit: str = Field(min_length=4)
    """Commit the agent starts from (the repo is at this commit, test patch withheld)."""
    patch: str
    """Gold patch (non-test files), applied by ``validate()``."""
    test_patch: str = Field(min_length=1)
    """Test-file patch applied before grading; its files are the test directives."""
    problem_statement: str
    """Issue text given to the agent as the prompt."""
    hints_text: str = ""
    """Issue comments made before the fix (optional extra prompt context)."""
    version: str = ""
    """Repository version key (selects the test command for the Lite repos)."""
    FAIL_TO_PASS: tuple[str, ...]
    """Tests that fail at base_commit and must pass after the fix."""
    PASS_TO_PASS: tuple[str, ...] = ()
    """Tests that pass at base_commit and must keep passing."""
    GOLD_XFAIL: tuple[str, ...] = ()
    """FAIL_TO_PASS tests whose gold run ends XFAIL (not a SWE-bench column; recorded from a gold run). Only these
    may pass as XFAIL: any other F2P test must pass outright, so ``pytest.xfail()`` in the fix does not count."""
    environment_setup_commit: str = ""
    """Commit used to build the instance's environment image."""
    created_at: str = ""
    """Creation time of the upstream PR (ISO 8601 text)."""
    test_cmd: str | None = None
    """Custom test command (instances outside the Lite repo table); directives are appended to it."""
    log_parser: str | None = None
    """Custom log parser name (see :data:`crf_prime.swe.logparse.PARSERS`)."""

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", "GOLD_XFAIL", mode="before")
    @classmethod
    def _decode_test_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as e:
                raise ValueError(f"not a JSON-encoded list of test ids: {e.msg} at char {e.pos}") from None
            if not isinstance(value, list):
                raise ValueError(f"JSON must encode a list of test ids, got {type(value).__name__}")
        return value

    @field_validator("FAIL_TO_PASS")
    @classmethod
    def _needs_a_failing_test(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("FAIL_TO_PASS is empty: an instance must have at least one test its fix makes pass")
        return value

    @field_validator("hints_text", "version", "environment_setup_commit", "created_at", mode="before")
    @classmethod
    def _none_as_empty(cls, value: Any) -> Any:
        return "" if value is None else value

    @property
    def image_key(self) -> str:
        """Local image name of the swebench harness (``sweb.eval.x86_64.<id>:latest``)."""
        return f"sweb.eval.x86_64.{self.instance_id}:latest".lower()

    def image(self, namespace: str = "swebench") -> str:
        """Image reference under a registry ``namespace`` ('' = local build name).

        Registries (Docker Hub) forbid ``__`` in names, so with a namespace the harness spells it ``_1776_``
        (swebench ``image_builder/image_spec.py``).
        """
        if not namespace:
            return self.image_key
        return f"{namespace.rstrip('/')}/{self.image_key}".replace("__", "_1776_")


def parse_instance(row: Mapping[str, Any], *, where: str) -> SweInstance:
    """Validate one raw row; ``where`` names it in errors (e.g. ``data/lite.jsonl:7``)."""
    if not isinstance(row, Mapping):
        raise InstanceError(f"{where}: row is a {type(row).__name__}, expected an object with SWE-bench columns")
    try:
        return SweInstance.model_validate(dict(row))
    except ValidationError as e:
        rid = row.get("instance_id", "?")
        problems = "; ".join(
            f"field {'.'.join(str(p) for p in err['loc']) or '<row>'}: {err['msg']}" for err in e.errors()
        )
        raise InstanceError(f"{where} (instance_id={rid!r}): {problems}") from None
