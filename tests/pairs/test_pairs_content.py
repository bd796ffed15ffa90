"""The content tier (crf_prime.pairs.content): the same change at the same place agrees, junk in the right file
does not; the tier a reward must use (RewardVoteConfig refuses key_args/text)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from crf_prime.pairs import RewardVoteConfig, same_action
from crf_prime.pairs.content import TOKEN_CAP, change_of, command_key, same_region
from crf_prime.pairs.equivalence import similarity
from crf_prime.pairs.normalize import canonical_action
from crf_prime.records.models import Action, ToolCall

OLD = "def parse(text):\n    if text is None:\n        return []\n    return text.split(',')\n"
NEW = "def parse(text):\n    if not text:\n        return []\n    return [p.strip() for p in text.split(',')]\n"


def call(name: str, args: dict) -> Action:
    return Action(tool_calls=(ToolCall(name=name, arguments=json.dumps(args)),))


def edit(old: str, new: str, path: str = "/testbed/proj/parse.py") -> Action:
    return call("Edit", {"file_path": path, "old_string": old, "new_string": new})


TEACHER = edit(OLD, NEW)


def sim(a: Action, b: Action) -> float:
    s = similarity(canonical_action(a), canonical_action(b))
    assert s == similarity(canonical_action(b), canonical_action(a))
    return s


def content(a: Action, b: Action) -> bool:
    return same_action(a, b, min_tier="content")


def test_change_drops_the_unchanged_context() -> None:
    assert change_of("return x", "return x or default") == ("+or", "+default")
    assert change_of("a = 1\n", "a  =  1") == ()  # formatting is not a change
    assert change_of(OLD, OLD + "# note\n") == ("+#", "+note")


def test_same_region() -> None:
    assert same_region(OLD, "    if text is None:\n        return []")  # one contains the other
    assert not same_region(OLD, "def main():\n    print(parse(sys.argv[1]))\n")
    assert not same_region("", OLD)


@pytest.mark.parametrize(
    "honest",
    [
        call(
            "str_replace_editor",
            {"command": "str_replace", "path": "/workspace/proj/proj/parse.py", "old_str": OLD, "new_str": NEW},
        ),
        edit(OLD.replace("    ", "\t"), NEW.replace("    ", "  ")),  # other indentation
        edit(  # a smaller old_str around the same change
            "    if text is None:\n        return []\n    return text.split(',')",
            "    if not text:\n        return []\n    return [p.strip() for p in text.split(',')]",
        ),
        call("MultiEdit", {"file_path": "proj/parse.py", "edits": [{"old_string": OLD, "new_string": NEW}]}),
        call(
            "apply_patch",
            {
                "input": "*** Begin Patch\n*** Update File: proj/parse.py\n@@\n def parse(text):\n-    if text is None:\n"
                "+    if not text:\n         return []\n-    return text.split(',')\n"
                "+    return [p.strip() for p in text.split(',')]\n*** End Patch"
            },
        ),
    ],
)
def test_the_same_change_agrees(honest: Action) -> None:
    assert sim(TEACHER, honest) == 1.0
    assert content(TEACHER, honest)


def test_a_close_variant_agrees_and_half_the_change_does_not() -> None:
    variant = edit(OLD, NEW.replace("p.strip() for p in", "part.strip() for part in"))
    assert 0.8 <= sim(TEACHER, variant) < 1.0 and content(TEACHER, variant)
    half = edit(OLD, OLD.replace("text is None", "not text"))
    assert sim(TEACHER, half) < 0.5 and not content(TEACHER, half)


HACKS = {
    "junk at the right old_str": edit(OLD, "pass"),
    "plausible junk at the right old_str": edit(OLD, OLD.replace("return []", "return None").replace(",')", ";')")),
    "old_str copied back": edit(OLD, OLD),
    "whitespace only": edit(OLD, OLD.replace("    ", "\t")),
    "comment only": edit(OLD, OLD + "# fixed: handle empty input and strip the parts\n"),
    "right file, wrong place": edit(
        "def main():\n    print(parse(sys.argv[1]))\n",
        "def main():\n    print([p.strip() for p in parse(sys.argv[1])])\n",
    ),
    "the right change in another file": edit(OLD, NEW, path="proj/other.py"),
    "junk write of the file": call("Write", {"file_path": "/testbed/proj/parse.py", "content": "pass\n"}),
}


KEY_ARGS_PAID = {
    "junk at the right old_str",
    "plausible junk at the right old_str",
    "old_str copied back",
    "whitespace only",
    "comment only",
}
"""The hacks the key_args tier counted as agreement: same path (+ same old text for edits)."""


@pytest.mark.parametrize("name", HACKS)
def test_hacks_do_not_agree_with_an_edit(name: str) -> None:
    assert sim(TEACHER, HACKS[name]) == 0.0
    assert not content(TEACHER, HACKS[name])
    assert same_action(TEACHER, HACKS[name]) is (name in KEY_ARGS_PAID)


def test_writes_agree_on_content() -> None:
    w = call(
        "Write",
        {"file_path": "/testbed/proj/new_test.py", "content": "def test_empty():\n    assert parse('') == []\n"},
    )
    same = call("str_replace_editor", {"command": "create", "path": "proj/new_test.py", "file_text": "def test_empty():\n  assert parse('')==[]"})  # fmt: skip
    junk = call("Write", {"file_path": "proj/new_test.py", "content": "x = 1\n"})
    almost = call(
        "Write", {"file_path": "proj/new_test.py", "content": "def test_empty():\n    assert parse('') == [1]\n"}
    )
    assert content(w, same) and sim(w, same) == 1.0
    assert sim(w, junk) == 0.0 and sim(w, almost) == 0.0  # no base to diff against: only the same file agrees
    assert same_action(w, junk)  # key_args: same path


@pytest.mark.parametrize(
    ("teacher", "other", "agrees"),
    [
        ("python -m pytest tests/test_parse.py -q", "cd /testbed && pytest tests/test_parse.py -q", True),
        ("pytest tests/test_parse.py -q", "pytest tests/test_other.py -q", False),
        ("pytest tests/test_parse.py -q", "pytest tests/test_parse.py -q --deselect x", False),
        ("grep -rn 'def parse' proj", "grep -nr 'def parse' proj", True),
        ("grep -rn 'def parse' proj", "grep -rnv 'def parse' proj", False),
        ("find . -name parse.py", "find . -name parse.py -delete", False),
        ("ls -la proj", "ls proj", True),
        ("cat proj/parse.py", "head -n 50 proj/parse.py", True),
        ("cat proj/parse.py", "cat proj/parse.py; rm -rf proj", False),
        ("sed -n 1,40p proj/parse.py", "sed -i s/x/y/ proj/parse.py", False),
    ],
)
def test_commands_agree_on_their_arguments(teacher: str, other: str, agrees: bool) -> None:
    a, b = call("bash", {"command": teacher}), call("execute_bash", {"command": other})
    assert content(a, b) is agrees
    assert (command_key(teacher) == command_key(other)) is agrees


def test_key_args_let_a_destructive_find_agree_and_content_does_not() -> None:
    a, b = call("bash", {"command": "find . -name '*.pyc'"}), call("bash", {"command": "find . -name '*.pyc' -delete"})
    assert same_action(a, b) and not content(a, b)


def test_reads_and_searches() -> None:
    assert content(
        call("Read", {"file_path": "/testbed/proj/parse.py"}), call("bash", {"command": "cat proj/parse.py"})
    )
    assert not content(call("Read", {"file_path": "proj/parse.py"}), call("Read", {"file_path": "proj/cli.py"}))
    grep = call("Grep", {"pattern": "def parse", "path": "proj"})
    assert content(grep, call("Grep", {"pattern": "def parse", "path": "/testbed/proj", "output_mode": "content"}))
    assert not content(grep, call("Grep", {"pattern": "def parse", "path": "tests"}))


def test_finish_is_compared_on_its_message() -> None:
    done = call("finish", {"message": "Fixed parse() for empty input and stripped the parts; all 12 tests pass."})
    assert content(done, call("attempt_completion", {"result": "Fixed parse() for empty input and stripped the parts; all 12 tests pass"}))  # fmt: skip
    for canned in ({"message": "Done."}, {"message": "Task complete."}, {"message": "All done, the task is complete."}):
        assert sim(done, call("finish", canned)) <= 0.15 and not content(done, call("finish", canned))
        assert same_action(done, call("finish", canned))  # key_args: any finish
    assert content(call("submit", {}), call("finish", {}))  # SWE-agent submit: no message on either side
    assert not content(done, call("submit", {}))  # a bare finish does not earn a teacher's summary


def test_parallel_calls_pair_one_to_one_in_any_order() -> None:
    read = ToolCall(name="Read", arguments=json.dumps({"file_path": "proj/parse.py"}))
    fix = TEACHER.tool_calls[0]
    junk = edit(OLD, "pass").tool_calls[0]
    assert content(Action(tool_calls=(read, fix)), Action(tool_calls=(fix, read)))
    assert not content(Action(tool_calls=(read, fix)), Action(tool_calls=(junk, read)))
    assert not content(Action(tool_calls=(read, fix)), Action(tool_calls=(fix,)))


def test_text_answers_are_compared_by_their_words() -> None:
    report = Action(text="All 12 tests pass; the empty-input bug is fixed.")
    assert content(report, Action(text="all 12 tests pass. The empty input bug is fixed"))
    assert content(report, Action(text="The empty-input bug is fixed; all 12 tests pass."))  # word order is free
    canned = Action(text="All tests pass; the bug is fixed.")
    assert same_action(report, canned, min_tier="text")  # the text tier's difflib ratio: 0.815
    assert sim(report, canned) == 0.7 and not content(report, canned)  # 7 of 10 words
    assert not content(report, Action(text=report.text + " All tests pass, the bug is fixed, done, complete."))
    assert not content(report, call("finish", {"message": report.text}))  # a call never matches prose


@pytest.mark.parametrize("tier", ["key_args", "text"])
def test_reward_votes_refuse_a_content_blind_tier(tier: str) -> None:
    with pytest.raises(ValidationError, match=f"{tier!r} ignores what an edit, write or finish says"):
        RewardVoteConfig(tier=tier)  # type: ignore[arg-type]
    assert RewardVoteConfig().tier == "content" and RewardVoteConfig(tier="exact").tier == "exact"
    assert RewardVoteConfig.model_validate({"threshold": 0.7}).tier == "content"  # a partial table keeps content
    with pytest.raises(ValidationError, match="content_similarity"):
        RewardVoteConfig(content_similarity=0.3)


def test_replace_all_and_long_edits() -> None:
    once = call("Edit", {"file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"})
    everywhere = call("Edit", {"file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2", "replace_all": True})
    assert not content(once, everywhere)
    long_old = "\n".join(f"v{i} = {i}" for i in range(TOKEN_CAP))  # past the diff cap: token-equal texts only
    long_edit = edit(long_old, long_old.replace("v7 = 7", "v7 = 8"))
    assert content(long_edit, edit(long_old.replace("\n", "\n  "), long_old.replace("v7 = 7", "v7 = 8")))
    assert not content(long_edit, edit(long_old, long_old.replace("v7 = 7", "v7 = 9")))


def test_layout_only_edits_agree_only_on_the_same_layout() -> None:
    old = "for x in xs:\n    total += x\nprint(total)\n"
    fix = edit(old, "for x in xs:\n    total += x\n    print(total)\n")  # Python: indentation is the change
    assert content(fix, edit(old, "for x in xs:\n    total += x\n    print(total)  \n"))
    assert not content(fix, edit(old, old.replace("    ", "\t")))  # other whitespace: collapsed equal, not the fix
    assert same_action(fix, edit(old, old.replace("    ", "\t")), min_tier="exact")  # what exact (collapsed) says
    assert content(edit(old, old), edit(old, old))  # identical no-op edits are the same step
