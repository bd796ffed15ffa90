"""``crf-prime relay serve|pull`` on the config CLI: ranges checked at launch, host failures one line with exit 4."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from crf_prime.cli import main, parse


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port on 127.0.0.1 that another socket is listening on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def one_error_line(err: str, command: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"crf-prime {command}: error: "), err
    return lines[0]


def test_serve_port_in_use_is_one_line_and_exit_4(tmp_path: Path, busy_port: int, capsys) -> None:
    argv = ["relay", "serve", "--broadcast-dir", str(tmp_path / "b"), "--data-dir", str(tmp_path / "data")]
    assert main([*argv, "--port", str(busy_port)]) == 4
    line = one_error_line(capsys.readouterr().err, "relay serve")
    assert line.endswith(f"cannot serve {tmp_path / 'data'} on 127.0.0.1:{busy_port}: Address already in use")
    assert not (tmp_path / "data").exists()  # nothing written before the port was taken


def test_gate_port_in_use_is_one_line_and_exit_4(tmp_path: Path, busy_port: int, capsys) -> None:
    argv = ["relay", "pull", "--server", "http://127.0.0.1:9", "--broadcast-dir", str(tmp_path / "b"), "--once"]
    argv += ["--gate.upstream", "http://127.0.0.1:8100", "--gate.port", str(busy_port)]
    assert main(argv) == 4
    line = one_error_line(capsys.readouterr().err, "relay pull")
    assert line.endswith(f"cannot start the admin gate on 127.0.0.1:{busy_port}: Address already in use")


def test_pull_once_with_no_server_up_is_exit_4(tmp_path: Path, capsys) -> None:
    # a closed port refuses at once (a listening socket that never answers would wait for the timeout)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    argv = ["relay", "pull", "--server", f"http://127.0.0.1:{closed}", "--broadcast-dir", str(tmp_path / "b")]
    assert main([*argv, "--once", "--timeout", "5"]) == 4
    assert "no relay server gave a valid index" in one_error_line(capsys.readouterr().err, "relay pull")


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--keep", "0"], "keep"),
        (["--port", "70000"], "port"),
        (["--shard-size-mb", "0"], "shard-size-mb"),
        (["--poll", "-1"], "poll"),
    ],
)
def test_serve_ranges_are_checked_before_any_work(tmp_path: Path, capsys, flags: list[str], field: str) -> None:
    argv = ["relay", "serve", "--broadcast-dir", str(tmp_path / "b"), "--data-dir", str(tmp_path / "data"), *flags]
    assert main(argv) == 2
    assert field in capsys.readouterr().err
    assert not (tmp_path / "data").exists()


def test_pull_servers_are_one_list_and_the_gate_is_nested() -> None:
    config = parse(
        "relay pull",
        ["--server", "http://a:8765", "http://b:8765", "--broadcast-dir", "/x", "--gate.upstream", "http://e:8100"],
    )
    assert config.server == ["http://a:8765", "http://b:8765"]
    assert (config.gate.upstream, config.gate.host, config.gate.port, config.gate.wait) == (
        "http://e:8100",
        "127.0.0.1",
        8190,
        600.0,
    )
    assert parse("relay pull", ["--server", "http://a:8765", "--broadcast-dir", "/x"]).gate is None


def test_pull_help_points_the_gate_at_the_engine_port(capsys) -> None:
    assert main(["relay", "pull", "--help"]) == 0
    out = capsys.readouterr().out
    assert "http://127.0.0.1:8100" in out and "http://127.0.0.1:8000" not in out  # docs/multinode.md says why


def test_pull_toml_and_flags_share_names(tmp_path: Path) -> None:
    toml = tmp_path / "relay.toml"
    toml.write_text('server = ["http://a:8765"]\nbroadcast_dir = "/x"\nkeep = 3\n[gate]\nupstream = "http://e:8100"\n')
    config = parse("relay pull", ["@", str(toml), "--gate.port", "8191", "--keep", "4"])
    assert (config.server, config.keep, config.gate.upstream, config.gate.port) == (
        ["http://a:8765"],
        4,
        "http://e:8100",
        8191,
    )
