"""The hint writer on a live (detached Ray) teacher pool: a second process joins the same ledger actor, so the
journal and the spend cap hold across processes, as across the worker processes of a verifiers env-server pool."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_hints_attach import make_trace

from crf_prime.hints import HintWriterConfig, attach_hint_async, hint_writer
from crf_prime.loopback import LoopbackOpenAI, Reply
from crf_prime.teachers import read_journal

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(180)]
NAMESPACE = "crf-prime"  # the live pool's default namespace, which the writer joins


def failing_trace(command: str):
    return make_trace([([("bash", f'{{"command": "{command}"}}')], ["E   assert 1 == 2\nexit code: 1"])])


async def test_live_hint_pool_is_shared_by_two_processes(ray_cluster, tmp_path: Path):
    from crf_prime.teachers import live

    try:
        with LoopbackOpenAI([Reply(content="Read the assertion.", cost=0.003)]) as server:
            teachers = tmp_path / "teachers.toml"
            teachers.write_text(
                f'[[teachers]]\nname = "coach"\nmodel = "scripted"\nbase_url = "{server.base_url}"\napi_key_var = ""\n'
                "price_out_per_mtok = 10.0\n"  # a hint reserves 512 tokens x $10/M = $0.00512
            )
            cfg = HintWriterConfig(
                teachers=teachers, name="coach", journal=tmp_path / "hints.jsonl", budget_usd=0.008, live="hints-test"
            )
            first = failing_trace("pytest -x")
            await attach_hint_async(first, writer=hint_writer(cfg))
            script = textwrap.dedent(
                f"""
                import asyncio, json, sys
                sys.path.insert(0, {str(Path(__file__).parent)!r})
                from test_hints_attach import make_trace
                from crf_prime.hints import HintWriterConfig, attach_hint_async, hint_writer
                cfg = HintWriterConfig.model_validate_json({cfg.model_dump_json()!r})
                cfg = cfg.model_copy(update={{"ray_address": {ray_cluster.address_info["address"]!r}}})
                def trace(command):
                    return make_trace([([("bash", '{{"command": "%s"}}' % command)], ["E   assert 1 == 2\\nexit code: 1"])])
                async def main():
                    same, other = trace("pytest -x"), trace("pytest -x tests/test_b.py")
                    for t in (same, other):
                        await attach_hint_async(t, writer=hint_writer(cfg))
                    return [dict(t.info) for t in (same, other)]
                infos = asyncio.run(main())
                print(json.dumps([{{k: i.get(k) for k in ("hint", "hint_source", "hint_cached", "hint_error")}}
                                  for i in infos]))
                """
            )
            proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=150)
            assert proc.returncode == 0, proc.stderr[-3000:]
            same, other = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        killed = live.shutdown("hints-test", namespace=NAMESPACE)
    assert first.info["hint"] == "Read the assertion." and first.info["hint_cached"] is False
    # the other process: the same episode comes from the shared journal, a new one meets the shared cap
    assert (same["hint"], same["hint_source"], same["hint_cached"]) == ("Read the assertion.", "llm", True)
    assert other["hint_source"] == "template"
    # $0.003 spent + $0.00512 worst case > $0.008: refused by the shared cap before anything is sent
    assert other["hint_error"].startswith("BudgetExhausted: hint budget reached: spent $0.0030 of $0.0080")
    assert len(server.requests) == 1 and killed == 2
    assert [r.ok for r in read_journal(tmp_path / "hints.jsonl")] == [True]
