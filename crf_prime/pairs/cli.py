"""``crf-prime pairs``: a replay journal + states to TRL DPO preference pairs, with a normalisation pass and stats."""

from __future__ import annotations

import argparse

HELP = (
    "Turn teacher (dis)agreement from a replay journal into DPO preference pairs (channel 3: trace replay, "
    "crf-prime's own research addition, not part of Cursor's Composer recipe)."
)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("pairs", help=HELP, description=HELP)
    p.add_argument("journal", metavar="JOURNAL", help="replay journal JSONL written by `crf-prime replay`")
    p.add_argument("--states", required=True, help="states JSONL written by `crf-prime ingest`")
    p.add_argument("--out", required=True, help="output pairs JSONL (TRL conversational preference format)")
    p.add_argument("--threshold", type=float, default=0.5, help="plurality share of voting teachers needed (0.5)")
    p.add_argument("--min-support", type=int, default=2, help="teachers that must agree for a consensus (2)")
    p.add_argument("--min-teachers", type=int, default=2, help="voting teachers needed at a state (2)")
    p.add_argument("--tier", choices=("exact", "key_args", "text"), default="key_args", help="equivalence tier")
    p.add_argument("--text-similarity", type=float, default=0.8, help="difflib ratio for the text tier")
    p.add_argument("--no-student-over-minority", action="store_true", help="only majority > student pairs")
    p.add_argument("--include-same-family", action="store_true", help="keep votes of the trace's model family")
    p.add_argument("--max-prompt-chars", type=int, default=400_000)
    p.add_argument("--max-action-chars", type=int, default=40_000)
    p.add_argument("--stats-out", help="also write the stats as JSON here")
    p.add_argument("--hf-dataset", metavar="DIR", help="also save a datasets.Dataset here (needs the hf extra)")
    p.set_defaults(func=run_pairs)


def run_pairs(args: argparse.Namespace) -> int:
    from collections import Counter
    from pathlib import Path

    from pydantic import ValidationError
    from rich.console import Console
    from rich.table import Table

    from crf_prime.pairs.build import PairConfig, build_pairs
    from crf_prime.pairs.filters import FilterConfig, normalise_pairs
    from crf_prime.pairs.io import to_hf_dataset, write_pairs_jsonl
    from crf_prime.pairs.stats import compute_stats
    from crf_prime.teachers.journal import JournalError, read_journal
    from crf_prime.traces.ingest import read_states
    from crf_prime.traces.records import IngestError

    console = Console(stderr=True)
    try:
        config = PairConfig(
            threshold=args.threshold,
            min_support=args.min_support,
            min_teachers=args.min_teachers,
            tier=args.tier,
            text_similarity=args.text_similarity,
            student_over_minority=not args.no_student_over_minority,
            exclude_same_family=not args.include_same_family,
        )
        filters = FilterConfig(max_prompt_chars=args.max_prompt_chars, max_action_chars=args.max_action_chars)
    except ValidationError as e:
        console.print(f"[red]error:[/red] {e}")
        return 2
    for p in (args.journal, args.states):
        if not Path(p).is_file():
            console.print(f"[red]error:[/red] {p}: no such file")
            return 1
    votes: list = []
    counts: Counter[str] = Counter()
    kept: list = []
    try:
        with console.status("building pairs"):
            raw = build_pairs(read_states(args.states), read_journal(args.journal), config, votes_out=votes)
            kept = list(normalise_pairs(raw, filters, counts))
    except (IngestError, JournalError) as e:
        console.print(f"[red]error:[/red] {e}")
        return 1
    write_pairs_jsonl(kept, args.out)
    stats = compute_stats(votes, kept)
    if args.stats_out:
        Path(args.stats_out).write_text(stats.model_dump_json(indent=2))
    if args.hf_dataset:
        to_hf_dataset(kept).save_to_disk(args.hf_dataset)

    table = Table(title=f"pairs -> {args.out}")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("states with answers", str(stats.states_voted))
    table.add_row("states with consensus", str(stats.states_with_consensus))
    table.add_row("student agrees with consensus", str(stats.student_agrees))
    for kind, n in sorted(stats.pairs_by_kind.items()):
        table.add_row(f"pairs: {kind}", str(n))
    for reason, n in sorted(counts.items()):
        if reason != "kept":
            table.add_row(f"dropped: {reason}", str(n))
    table.add_row("pairs written", str(len(kept)))
    table.add_row("pairs/trace (mean, max)", f"{stats.pairs_per_trace_mean:.2f}, {stats.pairs_per_trace_max}")
    table.add_row("margin: pairs vs random", f"{stats.pair_margin_mean:.3f} vs {stats.random_margin_mean:.3f}")
    table.add_row("chosen out-votes rejected", f"{stats.pair_chosen_wins:.0%} vs {stats.random_chosen_wins:.0%} random")
    for t, rate in stats.teacher_agreement_with_student.items():
        table.add_row(f"agreement with student: {t}", f"{rate:.0%}")
    for t, n in stats.excluded_same_family.items():
        table.add_row(f"excluded (same family): {t}", str(n))
    console.print(table)
    return 0
