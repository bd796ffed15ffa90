"""``crf-prime loopback serve``: the scripted stand-in as a command, talked to with the real ``openai`` client."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from crf_prime.cli import main

ASK = (
    "import openai; c = openai.OpenAI(max_retries=0)\n"  # base URL and key come from the environment
    "for _ in range({n}): print(c.chat.completions.create(model='m', messages=[{{'role': 'user', 'content': 'hi'}}])"
    ".choices[0].message.content)\n"
)


def ask(n: int) -> list[str]:
    return [sys.executable, "-c", ASK.format(n=n)]


def test_command_runs_against_the_server_and_exits_with_its_code(tmp_path: Path, capfd) -> None:
    replies = tmp_path / "replies.jsonl"
    replies.write_text('{"content": "first"}\n\n{"content": "second"}\n')
    assert main(["loopback", "serve", "--replies", str(replies), "--cycle", "--", *ask(3)]) == 0
    out = capfd.readouterr().out.splitlines()
    assert out[0].startswith("loopback serving http://127.0.0.1:") and out[1:] == ["first", "second", "first"]
    assert main(["loopback", "serve", "--content", "same", "--", *ask(2)]) == 0
    assert capfd.readouterr().out.splitlines()[1:] == ["same", "same"]
    assert main(["loopback", "serve", "--", sys.executable, "-c", "raise SystemExit(7)"]) == 7


def test_replies_past_the_end_are_http_500_without_cycle(tmp_path: Path, capfd) -> None:
    replies = tmp_path / "replies.jsonl"
    replies.write_text('{"content": "only"}\n')
    assert main(["loopback", "serve", "--replies", str(replies), "--", *ask(2)]) == 1
    captured = capfd.readouterr()
    assert captured.out.splitlines()[1:] == ["only"]
    assert "loopback script exhausted: request #2 but only 1 replies" in captured.err


def test_billing_reports_cost(tmp_path: Path, capfd) -> None:
    code = (
        "import openai; r = openai.OpenAI().chat.completions.create(model='m', messages=[{'role': 'user', "
        "'content': 'x' * 400}]); print(r.usage.prompt_tokens, r.usage.model_extra['cost'])"
    )
    argv = ["loopback", "serve", "--content", "y" * 40, "--billing.price-in-per-mtok", "1000000"]
    assert main([*argv, "--billing.price-out-per-mtok", "0", "--", sys.executable, "-c", code]) == 0
    prompt_tokens, cost = capfd.readouterr().out.splitlines()[1].split()
    assert float(cost) == int(prompt_tokens) > 100


def test_bad_replies_line_is_named(tmp_path: Path, capsys) -> None:
    replies = tmp_path / "replies.jsonl"
    replies.write_text('{"content": "ok"}\n{"content": "x", "delay_s": "soon"}\n')
    assert main(["loopback", "serve", "--replies", str(replies), "--", "true"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"crf-prime loopback serve: error: {replies}:2: not a reply: ") and "\n" not in err


def test_port_in_use_is_one_line_and_exit_4(capsys) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        assert main(["loopback", "serve", "--port", str(port), "--", "true"]) == 4
    err = capsys.readouterr().err.strip()
    assert err == f"crf-prime loopback serve: error: cannot serve on 127.0.0.1:{port}: Address already in use"


@pytest.mark.slow
def test_serves_until_sigterm_with_a_ready_file(tmp_path: Path) -> None:
    ready = tmp_path / "loopback.url"
    argv = [sys.executable, "-m", "crf_prime.cli", "loopback", "serve", "--ready-file", str(ready), "--model", "tiny"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # printed after the ready file is in place
        url = ready.read_text().strip()
        assert line.strip() == f"loopback serving {url}" and url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{url}/models", timeout=30) as response:
            models = json.load(response)
        assert [m["id"] for m in models["data"]] == ["tiny"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 130  # interrupted, as docs/cli.md says for every command
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_command_that_cannot_start_is_bad_input(capsys) -> None:
    assert main(["loopback", "serve", "--", "no-such-command-crf"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "crf-prime loopback serve: error: argv: cannot run no-such-command-crf: No such file or directory"
