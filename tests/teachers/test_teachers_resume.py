"""kill -9 in the middle of a replay, then resume: nothing already paid for is sent again (counted at the server)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from teachers_helpers import Router, answer, make_state, write_states, write_teachers_toml

from crf_prime.cli import main
from crf_prime.loopback import LoopbackOpenAI
from crf_prime.teachers.journal import intents_path, read_intents, read_journal

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def test_sigkill_mid_run_then_resume_sends_no_duplicate(tmp_path):
    router = Router(lambda model, sid, n: answer(cost=0.001, delay_s=0.05))
    n_states = 60
    states = write_states(tmp_path / "states.jsonl", [make_state(i) for i in range(n_states)])
    out = tmp_path / "out"
    journal = out / "journal.jsonl"
    with LoopbackOpenAI(router) as server:
        toml = write_teachers_toml(tmp_path / "teachers.toml", server.base_url, ("a", "b", "c"), max_concurrency=3)
        argv = ["replay", str(states), "--teachers", str(toml), "--out", str(out), "--no-progress"]
        env = {**os.environ, "CRF_TEST_KEY": "sk-test"}
        proc = subprocess.Popen([sys.executable, "-m", "crf_prime.cli", *argv], env=env, stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if journal.exists() and journal.read_bytes().count(b"\n") >= 30:
                    break
                assert proc.poll() is None, "replay subprocess exited before it could be killed"
                time.sleep(0.02)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
        first = list(read_journal(journal))
        intents = list(read_intents(intents_path(journal)))
        done_before = {r.key for r in first}
        lost = {(i.state_id, i.teacher) for i in intents} - done_before
        sent_before = len(server.requests)
        assert 30 <= len(first) < 3 * n_states and lost  # killed mid-run with calls in flight

        os.environ["CRF_TEST_KEY"] = "sk-test"
        try:
            rc = main(argv)
        finally:
            del os.environ["CRF_TEST_KEY"]
    assert rc == 0
    assert router.duplicates() == {}  # zero duplicate calls at the server
    assert len(server.requests) == sent_before + 3 * n_states - len(done_before) - len(lost)
    rows = list(read_journal(journal))
    keys = {r.key for r in rows}
    assert len(keys) == 3 * n_states == len(rows)
    lost_rows = {r.key for r in rows if r.error_type == "lost"}
    assert lost_rows == lost
    assert all(r.ok for r in rows if r.key not in lost)
