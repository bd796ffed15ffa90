"""``crf-prime pairs --journal J --states S --out pairs.jsonl``: a replay journal + states to TRL DPO preference
pairs, with a normalisation pass and stats."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pydantic_config import BaseConfig

from crf_prime.clihelp import print_next
from crf_prime.errors import InputError, NothingProduced
from crf_prime.outputs import output_dir, output_file
from crf_prime.pairs.build import PairConfig, build_pairs
from crf_prime.pairs.filters import FilterConfig, normalise_pairs
from crf_prime.pairs.io import to_hf_dataset, write_pairs_jsonl
from crf_prime.pairs.stats import compute_stats
from crf_prime.records.journal import read_journal
from crf_prime.records.states import read_states


class PairsConfig(BaseConfig):
    journal: Path
    """Replay journal JSONL written by ``crf-prime teachers replay`` (a file: ``OUT/journal.jsonl``)."""
    states: Path
    """States JSONL written by ``crf-prime traces ingest`` (a file)."""
    out: Path
    """Output file: pairs JSONL in TRL's conversational preference format (written atomically)."""
    votes: PairConfig = PairConfig()
    """How the teachers' answers become a consensus and which pairs are emitted."""
    filters: FilterConfig = FilterConfig()
    """Length limits of the normalisation pass."""
    stats_out: Path | None = None
    """Also write the stats as JSON to this file."""
    hf_dataset: Path | None = None
    """Also save a ``datasets.Dataset`` to this directory (needs the hf extra)."""


def run(config: PairsConfig) -> int:
    """Turn teacher (dis)agreement from a replay journal into DPO pairs (channel 3: crf-prime's addition, not part of Cursor's recipe)."""

    from rich.console import Console  # start-up: +341 ms on every command

    output_file("out", config.out)
    if config.stats_out is not None:
        output_file("stats_out", config.stats_out)
    if config.hf_dataset is not None:
        output_dir("hf_dataset", config.hf_dataset)
    if not config.journal.is_file():
        raise InputError.field("journal", f"{config.journal}: no such file")
    console = Console(stderr=True)
    votes: list = []
    counts: Counter[str] = Counter()
    with console.status("building pairs"):
        raw = build_pairs(read_states(config.states), read_journal(config.journal), config.votes, votes_out=votes)
        kept = list(normalise_pairs(raw, config.filters, counts))
    if not votes:
        raise NothingProduced(
            f"no state of {config.states} has an answer in {config.journal}: is it the journal of these states?"
        )
    if not kept:
        raise NothingProduced(
            f"0 pairs: {len(votes)} states have answers, {sum(v.consensus is not None for v in votes)} a consensus, "
            f"dropped {dict(counts)}; see --votes.* and --filters.*"
        )
    write_pairs_jsonl(kept, config.out)
    stats = compute_stats(votes, kept)
    if config.stats_out is not None:
        config.stats_out.write_text(stats.model_dump_json(indent=2))
    if config.hf_dataset is not None:
        to_hf_dataset(kept).save_to_disk(str(config.hf_dataset))
    console.print(_table(config.out, stats, counts, len(kept)))

    print_next(
        f"wrote {len(kept)} pairs to {config.out}",
        [
            (
                f'datasets.load_dataset("json", data_files="{config.out}", split="train")',
                "TRL's DPOTrainer takes these prompt / chosen / rejected rows as they are (docs/trace_replay.md)",
            )
        ],
    )
    return 0


def _table(out: Path, stats, counts, written: int):
    from rich.table import Table  # start-up: +55 ms on every command

    table = Table(title=f"pairs -> {out}")
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
    table.add_row("pairs written", str(written))
    table.add_row("pairs/trace (mean, max)", f"{stats.pairs_per_trace_mean:.2f}, {stats.pairs_per_trace_max}")
    table.add_row("margin: pairs vs random", f"{stats.pair_margin_mean:.3f} vs {stats.random_margin_mean:.3f}")
    table.add_row("chosen out-votes rejected", f"{stats.pair_chosen_wins:.0%} vs {stats.random_chosen_wins:.0%} random")
    for t, rate in stats.teacher_agreement_with_student.items():
        table.add_row(f"agreement with student: {t}", f"{rate:.0%}")
    for t, n in stats.excluded_same_family.items():
        table.add_row(f"excluded (same family): {t}", str(n))
    return table
