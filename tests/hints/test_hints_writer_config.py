"""The documented ``hint_writer`` TOML tables validate with verifiers' own env config classes (the check prime-rl's
EnvConfig runs: taskset narrowed to the environment's config class, extra keys forbidden), for both environments."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from pydantic import ValidationError

from crf_prime.hints import HintWriterConfig

REPO = Path(__file__).resolve().parents[2]
TASKSETS = {"feature-deletion": 'tasks = "tasks/featdel-train"\n', "swebench-lite": 'dataset = "lite.jsonl"\n'}


def doc_snippets() -> list[tuple[str, str]]:
    """(doc file, TOML block) for every fenced ``toml`` block of the docs that sets a hint_writer table."""
    out = []
    for doc in ("docs/running.md", "docs/environments.md"):
        for block in re.findall(r"```toml\n(.*?)```", (REPO / doc).read_text(), flags=re.S):
            if "hint_writer]" in block:
                out.append((doc, block))
    return out


def source_env(taskset_id: str, snippet: str) -> dict:
    """The first train source's ``env`` table of a prime-rl config holding the snippet after the taskset table."""
    text = (
        '[[orchestrator.train.source]]\nname = "featdel-hints"\n\n'
        f'[orchestrator.train.source.env.taskset]\nid = "{taskset_id}"\n{TASKSETS[taskset_id]}\n{snippet}'
    )
    return tomllib.loads(text)["orchestrator"]["train"]["source"][0]["env"]


def test_docs_show_a_hint_writer_table():
    assert {doc for doc, _ in doc_snippets()} == {"docs/running.md", "docs/environments.md"}


@pytest.mark.parametrize("taskset_id", sorted(TASKSETS))
@pytest.mark.parametrize("doc,snippet", doc_snippets(), ids=lambda v: v if v.endswith(".md") else "")
def test_documented_hint_writer_table_validates_with_verifiers(taskset_id: str, doc: str, snippet: str):
    import verifiers.v1 as vf

    cfg = vf.SingleAgentEnvConfig.model_validate(source_env(taskset_id, snippet))
    writer = cfg.taskset.task.hint_writer
    assert isinstance(writer, HintWriterConfig), doc
    assert (writer.teachers, writer.name, writer.journal, writer.budget_usd) == (
        Path("configs/teachers.toml"),
        "deepseek",
        Path("runs/hints/journal.jsonl"),
        5.0,
    )
    assert writer.name in {t["name"] for t in tomllib.loads((REPO / writer.teachers).read_text())["teachers"]}


@pytest.mark.parametrize("taskset_id", sorted(TASKSETS))
def test_hint_writer_defaults_to_none_and_rejects_unknown_keys(taskset_id: str):
    import verifiers.v1 as vf

    plain = vf.SingleAgentEnvConfig.model_validate(source_env(taskset_id, ""))
    assert plain.taskset.task.hint_writer is None
    typo = '[orchestrator.train.source.env.taskset.task.hint_writer]\nname = "deepseek"\nbudget = 5.0\n'
    with pytest.raises(ValidationError, match=r"hint_writer\.budget\n  Extra inputs are not permitted"):
        vf.SingleAgentEnvConfig.model_validate(source_env(taskset_id, typo))


@pytest.mark.prime_rl
def test_a2_with_hint_writer_validates_as_prime_rl_rl_config(tmp_path: Path):
    """Opt-in (CRF_PRIME_RL_SRC): arm A2 with the documented table on its opsd source, composed as `uv run rl @ ...`
    composes it, validates as prime-rl's real RLConfig."""
    from prime_rl_support import prime_rl_on_path

    ladder = REPO / "configs" / "ladder"
    (_, snippet), *_ = doc_snippets()
    # the table header after the last [[orchestrator.train.source]] belongs to that source (featdel-hints)
    overlay = tmp_path / "a2_hints_llm.toml"
    overlay.write_text((ladder / "a2_hints.toml").read_text() + "\n" + snippet)
    with prime_rl_on_path(environments=True):
        from prime_rl.configs.rl import RLConfig
        from pydantic_config import cli

        args = ["@", str(ladder / "a0_rlvr.toml"), "@", str(ladder / "a1_dr_grpo.toml"), "@", str(overlay)]
        cfg = cli(RLConfig, args=args)
    plain, hinted = cfg.orchestrator.train.source
    assert (plain.resolved_name, plain.env.taskset.task.hint_writer) == ("featdel", None)
    assert hinted.resolved_name == "featdel-hints" and hinted.algo.type == "opsd"
    assert (
        hinted.env.taskset.task.hint_writer.model_dump()
        == HintWriterConfig(name="deepseek", budget_usd=5.0).model_dump()
    )
