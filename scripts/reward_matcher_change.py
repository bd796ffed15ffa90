"""What the content tier changes against key_args: consensus actions, DPO pairs and agreement decisions.

Two inputs, each counted under ``--votes.tier key_args`` (before) and ``content`` (after), everything else default:

* the rehearsal's replay inputs (the states and journal ``scripts/rehearse/rehearse.py`` builds for the A3/A4 arms,
  from ``tests/traces/replay_support.py``), or ``--states S --journal J`` of your own replay: states with a
  consensus (= trace-replay tasks), consensus actions that change (a consensus appears, disappears or gains/loses
  members), DPO pairs by kind and pairs that change;
* the ingest hold-out traces (``tests/traces/fixtures/``), which have no teacher answers: every pair of recorded
  actions from two different states is compared, and the pairs each tier calls the same step are listed; then each
  recorded action (and each teacher action of the journal) is mutated the way a reward hunter would (junk or
  copied-back edit content, comment/whitespace-only edits, junk writes, a command's last argument swapped, a
  search's ``-v``/``-delete`` added, a canned finish message) and re-spelled the way an honest agent would (``cd`` prefix, re-indented edit text); the table
  gives how many of each the tier counts as the same step (mutation testing of the matcher).

    .venv/bin/python scripts/reward_matcher_change.py [--states S --journal J]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path

from crf_prime.pairs import PairConfig, build_pairs
from crf_prime.pairs.build import StateVotes, agrees
from crf_prime.pairs.normalize import canonical_action
from crf_prime.records.journal import read_journal
from crf_prime.records.models import Action, ToolCall
from crf_prime.records.states import read_states
from crf_prime.traces import ingest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "traces" / "fixtures"
TIERS = ("key_args", "content")


def rehearsal_inputs(work: Path) -> tuple[Path, Path]:
    """The replay states and journal the rehearsal's A3/A4 arms train on (scripts/rehearse/rehearse.py:prepare)."""
    sys.path.insert(0, str(REPO / "tests" / "traces"))
    from replay_support import write_replay_inputs

    states, journal, _ = write_replay_inputs(work)
    return states, journal


def votes_and_pairs(states: Path, journal: Path, tier: str) -> tuple[list[StateVotes], list]:
    votes: list[StateVotes] = []
    pairs = list(build_pairs(read_states(states), read_journal(journal), PairConfig(tier=tier), votes_out=votes))  # type: ignore[arg-type]
    return votes, pairs


def consensus_of(v: StateVotes) -> tuple[str, ...] | None:
    return tuple(sorted(v.clusters[v.consensus].teachers)) if v.consensus is not None else None


def pair_key(p) -> tuple:  # type: ignore[no-untyped-def]
    return (p.state_id, p.kind, tuple(p.chosen_by), tuple(p.rejected_by))


def replay_report(states: Path, journal: Path) -> None:
    result = {tier: votes_and_pairs(states, journal, tier) for tier in TIERS}
    (before_votes, before_pairs), (after_votes, after_pairs) = result["key_args"], result["content"]
    before = {v.state_id: consensus_of(v) for v in before_votes}
    after = {v.state_id: consensus_of(v) for v in after_votes}
    changed = [s for s in before if before[s] != after.get(s)]
    print(f"states with answers: {len(before)}")
    for tier, (votes, pairs) in result.items():
        kinds = {k: sum(p.kind == k for p in pairs) for k in ("majority_over_student", "student_over_minority")}
        print(
            f"  {tier:>8}: consensus (tasks) {sum(c is not None for c in map(consensus_of, votes))}, pairs {len(pairs)} {kinds}"
        )
    print(f"consensus actions that change: {len(changed)}")
    for s in changed:
        print(f"  {s}: {before[s]} -> {after.get(s)}")
    b, a = set(map(pair_key, before_pairs)), set(map(pair_key, after_pairs))
    print(f"pairs that change: {len(b ^ a)} (only key_args: {len(b - a)}, only content: {len(a - b)})")
    for key in sorted(b ^ a):
        print(f"  {'-' if key in b else '+'} {key}")


def holdout_report() -> list[Action]:
    states = list(ingest([FIXTURES]))
    actions = [
        (f"{s.source.trace_id or Path(s.source.file).name}#{s.step}", canonical_action(s.student_action))
        for s in states
    ]
    print(f"hold-out states: {len(states)} ({FIXTURES.relative_to(REPO)}); no teacher answers exist for them")
    pairs = list(itertools.combinations(actions, 2))
    same = {tier: [(x, y) for (x, a), (y, b) in pairs if agrees(a, b, PairConfig(tier=tier))] for tier in TIERS}  # type: ignore[arg-type]
    print(f"pairs of recorded actions from two states: {len(pairs)}")
    for tier in TIERS:
        print(f"  same step under {tier}: {len(same[tier])}")
    for x, y in sorted(set(same["key_args"]) ^ set(same["content"])):
        print(f"  {'only key_args' if (x, y) in same['key_args'] else 'only content'}: {x} ~ {y}")
    return [s.student_action for s in states]


def _with(call: ToolCall, **update: str) -> Action:
    args = json.loads(call.arguments or "{}")
    return Action(tool_calls=(ToolCall(name=call.name, arguments=json.dumps({**args, **update})),))


def variants(action: Action) -> tuple[dict[str, Action], dict[str, Action]]:
    """(hacks, honest re-spellings) of a one-call action, by what the call does."""
    if len(action.tool_calls) != 1:
        return {}, {}
    call = action.tool_calls[0]
    canon = canonical_action(action).calls
    name = canon[0].name if canon else ""
    raw = json.loads(call.arguments or "{}") if call.arguments.strip().startswith("{") else {}
    if name == "edit":
        old_key = next((k for k in ("old_string", "old_str") if k in raw), None)
        new_key = next((k for k in ("new_string", "new_str") if k in raw), None)
        if old_key is None or new_key is None:
            return {}, {}
        old, new = str(raw[old_key]), str(raw[new_key])
        hacks = {
            "edit: junk new text": _with(call, **{new_key: "pass"}),
            "edit: old text copied back": _with(call, **{new_key: old}),
            "edit: comment only": _with(call, **{new_key: old + "  # fixed"}),
            "edit: whitespace only": _with(call, **{new_key: old.replace(" ", "  ") + "\n"}),
        }
        return hacks, {"edit: re-indented": _with(call, **{new_key: new.replace("    ", "\t")})}
    if name == "write":
        key = next((k for k in ("content", "file_text", "text") if k in raw), "content")
        return {"write: junk content": _with(call, **{key: "pass"})}, {}
    if name == "bash":
        key = "command" if "command" in raw else "cmd"
        command = str(raw.get(key, ""))
        parts = command.split()
        swapped = " ".join([*parts[:-1], "other_target"]) if len(parts) > 1 else command + " other_target"
        hacks = {"bash: last argument swapped": _with(call, **{key: swapped})}
        program = parts[0].rsplit("/", 1)[-1] if parts else ""
        if program in ("grep", "rg", "ag", "find"):  # a flag that turns a search into another step
            flag = " -delete" if program == "find" else " -v"
            hacks["bash: search flag added"] = _with(call, **{key: command + flag})
        return hacks, {"bash: cd prefix": _with(call, **{key: "cd /testbed && " + command})}
    if name == "finish" and any(isinstance(v, str) and v.strip() for v in raw.values()):
        return {"finish: canned message": _with(call, message="Done.")}, {}
    return {}, {}


def mutation_report(actions: list[Action]) -> None:
    counts: dict[str, dict[str, list[int]]] = {}
    for action in actions:
        hacks, honest = variants(action)
        for label, variant in [*hacks.items(), *honest.items()]:
            row = counts.setdefault(label, {t: [0, 0] for t in TIERS})
            for tier in TIERS:
                row[tier][0] += agrees(canonical_action(action), canonical_action(variant), PairConfig(tier=tier))  # type: ignore[arg-type]
                row[tier][1] += 1
    print(
        "variants of the recorded and teacher actions counted as the same step (hacks should be 0, re-spellings all):"
    )
    for label, row in sorted(counts.items()):
        print(f"  {label:<30} " + "  ".join(f"{t} {row[t][0]}/{row[t][1]}" for t in TIERS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=Path)
    parser.add_argument("--journal", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.states and args.journal:
            states, journal = args.states, args.journal
            print(f"== replay: {states} + {journal}")
        else:
            states, journal = rehearsal_inputs(Path(tmp))
            print("== the rehearsal's replay inputs (A3/A4 arms)")
        replay_report(states, journal)
        teacher_actions = [r.action for r in read_journal(journal) if r.ok and r.action is not None]
    print("== the ingest hold-out traces")
    recorded = holdout_report()
    print("== mutants of the hold-out recorded actions and the replay's teacher actions")
    mutation_report(recorded + teacher_actions)


if __name__ == "__main__":
    main()
