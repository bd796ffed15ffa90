"""scripts/reward_matcher_change.py: the before/after counts of the content tier run and say what they measure."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reward_matcher_change.py"


def test_counts_on_the_rehearsal_inputs_and_the_holdout(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    spec = importlib.util.spec_from_file_location("reward_matcher_change", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", [str(SCRIPT)])
    module.main()
    out = capsys.readouterr().out
    assert "states with answers: 5" in out and "consensus actions that change: 0" in out
    assert "same step under key_args: 3" in out and "same step under content: 1" in out
    rows = dict(re.findall(r"^  ((?:bash|edit|finish|write): [^\n]*?)\s{2,}(key_args [^\n]*)$", out, re.M))
    hacks = [label for label in rows if label not in ("bash: cd prefix", "edit: re-indented")]
    assert hacks and all(re.search(r"content 0/\d+$", rows[label]) for label in hacks)
    for honest in ("bash: cd prefix", "edit: re-indented"):
        paid, total = re.search(r"content (\d+)/(\d+)$", rows[honest]).groups()  # type: ignore[union-attr]
        assert paid == total
