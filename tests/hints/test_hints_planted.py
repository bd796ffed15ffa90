"""The error-site detector on episodes with planted error sites (tests/hints/planted_sites.py): precision and recall
per kind, and the turns channel 2 distils, with exact expectations. ``benchmarks/hint_detector.py`` prints the table."""

from __future__ import annotations

from planted_sites import KINDS, corpus, example_hints, score


def test_precision_and_recall_per_kind_are_exactly_known():
    scores = score(corpus())
    table = {kind: (s.tp, s.fp, s.fn, s.turns_exact) for kind, s in scores.items()}
    assert table == {
        "unknown_tool": (3, 0, 0, 3),
        "invalid_json": (3, 0, 0, 3),
        "schema_violation": (3, 0, 0, 3),
        "tool_error": (3, 0, 0, 3),
        # the known false positive: a viewed log file that holds an old traceback
        "traceback": (3, 1, 0, 3),
        "failing_test": (3, 0, 0, 3),
    }


def test_every_planted_kind_gets_its_own_hint_line():
    hints = example_hints(corpus())
    assert list(hints) == list(KINDS)
    assert hints == {
        "unknown_tool": "- Reminder: the available tools are `bash`, `edit`, `submit`; `grep` is not one of them.",
        "invalid_json": (
            "- Tool arguments must be one valid JSON object; your call to `bash` was not "
            "(Expecting ',' delimiter: line 1 column 17 (char 16))."
        ),
        "schema_violation": (
            "- `edit` expects {path: string, old_str: string, new_str: string}; your call failed validation: "
            "'new_str' is a required property."
        ),
        "tool_error": "- `bash` failed: exit code 2, make: *** No rule",
        "traceback": (
            "- A `bash` run raised json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0) "
            "(at /w/app.py:7); fix that error before moving on."
        ),
        "failing_test": "- Test `tests/test_a.py::test_inc` failed.",
    }
