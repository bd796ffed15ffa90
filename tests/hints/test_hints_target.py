"""hint_target = "error_turns" on real verifiers v1 traces carrying tokens: only the turns that produced an error site
stay trainable (verifiers' own ``Branch.sampled_mask`` / ``Branch.logprobs`` read them back), and prime-rl's sample
building (opt-in, CRF_PRIME_RL_SRC) routes the opsd loss onto exactly those tokens."""

from __future__ import annotations

import pytest
import verifiers.v1 as vf
from planted_sites import EDIT_ARGS, Builder

from crf_prime.hints import TURNS_KEY, FailingTest, analyse, attach_hint, error_turns

TB = "Traceback (most recent call last):\n  File \"/w/app.py\", line 7, in <module>\n    main()\nKeyError: 'user'\n"


def sampled_positions(trace: vf.Trace) -> list[int]:
    (branch,) = trace.branches
    return [i for i, m in enumerate(branch.sampled_mask) if m]


def node_positions(trace: vf.Trace, index: int) -> list[int]:
    """Token positions of node ``index``'s completion in the (single) branch."""
    start = sum(len(n.token_ids) for n in trace.nodes[:index])
    node = trace.nodes[index]
    return [start + k for k, m in enumerate(node.mask) if m]


def test_traceback_turn_alone_stays_trainable_with_its_logprobs():
    b = Builder()
    b.turn([("bash", '{"command": "ls"}', "app.py\nexit code: 0")])
    bad = b.turn([("bash", '{"command": "python app.py"}', TB + "exit code: 1")])
    b.turn([("submit", "{}", "submitted")])
    logprobs = list(b.trace.nodes[bad].logprobs)
    hint = attach_hint(b.trace, target="error_turns")
    assert hint == "- A `bash` run raised KeyError: 'user' (at /w/app.py:7); fix that error before moving on."
    assert b.trace.info[TURNS_KEY] == [bad]
    assert sampled_positions(b.trace) == node_positions(b.trace, bad)
    (branch,) = b.trace.branches
    assert [branch.logprobs[i] for i in node_positions(b.trace, bad)] == logprobs
    assert sum(1 for x in branch.logprobs if x != 0.0) == len(logprobs)
    assert [n.logprobs for n in b.trace.nodes if n.sampled and not any(n.mask)] == [[], []]


def test_clean_episode_keeps_no_trainable_token():
    b = Builder()
    b.turn([("bash", '{"command": "ls"}', "app.py\nexit code: 0")])
    b.turn([("submit", "{}", "submitted")])
    assert attach_hint(b.trace, target="error_turns") == ""
    assert b.trace.info[TURNS_KEY] == []
    assert sampled_positions(b.trace) == []


def test_episode_target_leaves_the_trace_alone():
    b = Builder()
    b.turn([("bash", '{"command": "python app.py"}', TB)])
    b.turn([("submit", "{}", "submitted")])
    before = b.trace.model_dump()
    assert attach_hint(b.trace) != ""
    after = b.trace.model_dump()
    assert TURNS_KEY not in after["info"]
    assert after["nodes"] == before["nodes"]


def test_failing_tests_land_on_the_successful_edit_turns():
    b = Builder()
    b.turn([("edit", EDIT_ARGS, "error: old_str not found in a.py")])
    good_edit = b.turn([("edit", EDIT_ARGS, "edited a.py")])
    run = b.turn([("bash", '{"command": "pytest -q"}', "1 failed\nexit code: 1")])
    b.turn([("submit", "{}", "submitted")])
    failing = [FailingTest(name="tests/test_a.py::test_x", message="E assert None == 3")]
    attach_hint(b.trace, failing_tests=failing, target="error_turns")
    failed_edit = 1
    # the failed edit (its own tool error), the edit that produced the failing code, the failing test run (its call
    # id is the refused edit's, call_0: a flagged call of one turn does not hide another turn's error)
    assert b.trace.info[TURNS_KEY] == [failed_edit, good_edit, run]
    expected = [pos for i in (failed_edit, good_edit, run) for pos in node_positions(b.trace, i)]
    assert sampled_positions(b.trace) == expected


def test_failing_tests_without_an_edit_land_on_the_other_error_turns_else_the_last_turn():
    b = Builder()
    unknown = b.turn([("write_file", '{"path": "a.py"}', "error: unknown tool 'write_file'")])
    b.turn([("submit", "{}", "submitted")])
    failing = [FailingTest(name="t::x", message="boom")]
    assert error_turns(b.trace, analyse(b.trace, failing_tests=failing)) == [unknown]

    c = Builder()
    c.turn([("bash", '{"command": "ls"}', "a.py")])
    last = c.turn([("submit", "{}", "submitted")])
    assert error_turns(c.trace, analyse(c.trace, failing_tests=failing)) == [last]


def test_dropped_tool_call_is_an_invalid_json_site_at_its_turn():
    """verifiers' renderer client drops a tool call it cannot parse: the turn keeps sampled tokens and nothing else."""
    b = Builder()
    b.turn([("bash", '{"command": "ls"}', "a.py")])
    dropped = b.turn([], completion=9)
    sites = analyse(b.trace)
    assert [(s.kind, s.index, s.tool) for s in sites] == [("invalid_json", dropped, None)]
    hint = attach_hint(b.trace, target="error_turns")
    assert hint == (
        "- Your tool call could not be parsed and was dropped: write each call as one JSON object with the tool's "
        "name and its arguments, inside the tool-call tags."
    )
    assert b.trace.info[TURNS_KEY] == [dropped]


@pytest.mark.parametrize(
    "completion,content,found",
    [(2, None, False), (3, None, True), (9, "Done.", False)],
    ids=["stop-token-only", "three-tokens", "text-answer"],
)
def test_dropped_call_needs_an_empty_turn_with_sampled_tokens(completion: int, content: str | None, found: bool):
    b = Builder()
    b.turn([], completion=completion, content=content)
    assert [s.kind for s in analyse(b.trace)] == (["invalid_json"] if found else [])


def test_trace_record_dicts_are_targeted_like_traces():
    b = Builder()
    b.turn([("bash", '{"command": "ls"}', "a.py")])
    bad = b.turn([("bash", '{"command": "python app.py"}', TB)])
    record = b.trace.model_dump(mode="json")
    attach_hint(record, target="error_turns")
    attach_hint(b.trace, target="error_turns")
    assert record["info"][TURNS_KEY] == [bad]
    assert [n["mask"] for n in record["nodes"]] == [n.mask for n in b.trace.nodes]
    assert [n["logprobs"] for n in record["nodes"]] == [n.logprobs for n in b.trace.nodes]


@pytest.mark.prime_rl
def test_prime_rl_routes_the_opsd_loss_onto_the_error_turn_only():
    """Opt-in (CRF_PRIME_RL_SRC): prime-rl's own sample building (``trace_to_samples``) and opsd's loss routing
    (``stamp_loss_routing`` with ``ref_kl``) put distillation weight on the error turn's tokens and nowhere else; a
    clean episode is no trainable trace (``iter_trainable_traces``) and yields no sample."""
    from prime_rl_support import prime_rl_on_path

    with prime_rl_on_path():
        from prime_rl.orchestrator.algo.base import iter_trainable_traces
        from prime_rl.orchestrator.algo.routing import stamp_loss_routing
        from prime_rl.orchestrator.trajectories import trace_to_samples

    b = Builder()
    b.turn([("bash", '{"command": "ls"}', "a.py")])
    bad = b.turn([("bash", '{"command": "python app.py"}', TB)])
    b.turn([("submit", "{}", "submitted")])
    attach_hint(b.trace, target="error_turns")
    (sample,) = trace_to_samples(b.trace, env_name="featdel-hints")
    stamp_loss_routing(sample, "ref_kl")
    assert [i for i, w in enumerate(sample.ref_kl_weights) if w] == node_positions(b.trace, bad)
    assert sample.rl_weights == [0.0] * len(sample.token_ids)

    clean = Builder()
    clean.turn([("bash", '{"command": "ls"}', "a.py")])
    attach_hint(clean.trace, target="error_turns")
    episode = vf.Episode.model_construct(traces=[clean.trace])
    assert list(iter_trainable_traces([episode])) == []
    assert trace_to_samples(clean.trace) == []
