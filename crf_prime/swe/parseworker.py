"""Parsing an agent-controlled test log in a child process, so the env server's event loop never waits on it.

A worker thread is not enough: pure-Python loops and regex calls hold the GIL, and CPython hands it back to the
event loop only every ``sys.getswitchinterval()`` (5 ms), and only between bytecodes, so one long regex call or a
loaded machine stalls every rollout the server holds (issue 26: 155-239 ms for a 20 MB log). Here the log goes to
``python -I -m crf_prime.swe.parseworker`` over a pipe in 1 MB slices (each slice is encoded on the loop: well under
a millisecond), the child parses it with the same functions, and only the small verdict comes back as JSON. What
the loop does per slice is bounded by construction, whatever the log holds.

Wire format (stdin): one JSON header line ``{"op", "args", "junit_bytes"}``, then the junit report, then the log up
to the end of input (UTF-8 with ``surrogatepass``); stdout: one JSON document.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Collection, Sequence

from crf_prime.errors import InfraError

SLICE_CHARS = 1 << 20
"""Characters encoded and written per step (the loop runs other tasks between steps)."""
PARSE_TIMEOUT_S = 600.0
"""Wall limit of one parse in the child (the parsers are linear: a 20 MB log takes a few seconds)."""
_CODEC = ("utf-8", "surrogatepass")


class ParseWorkerError(InfraError):
    """The parsing child could not run or returned nothing readable."""


async def _call(op: str, args: dict, log: str, junit: bytes | None) -> object:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-m",
        "crf_prime.swe.parseworker",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None
    try:
        out, err = await asyncio.wait_for(_exchange(proc, op, args, log, junit), PARSE_TIMEOUT_S)
    except TimeoutError as e:
        proc.kill()
        await proc.wait()
        raise ParseWorkerError(f"parsing the test log took over {PARSE_TIMEOUT_S:g} s") from e
    if proc.returncode != 0:
        raise ParseWorkerError(f"the log parser exited {proc.returncode}: {err.decode(errors='replace')[-1000:]}")
    return json.loads(out)


async def _exchange(proc, op: str, args: dict, log: str, junit: bytes | None) -> tuple[bytes, bytes]:
    """Write the request in slices while reading the answer (neither pipe can fill up)."""
    stdin = proc.stdin
    head = {"op": op, "args": args, "junit_bytes": -1 if junit is None else len(junit)}

    async def feed() -> None:
        try:
            stdin.write(json.dumps(head).encode() + b"\n")
            if junit is not None:
                stdin.write(junit)
            for i in range(0, len(log), SLICE_CHARS):
                stdin.write(log[i : i + SLICE_CHARS].encode(*_CODEC))
                await stdin.drain()
                await asyncio.sleep(0)  # drain() need not yield: one slice per turn of the loop
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the child died: its exit status says why
        finally:
            stdin.close()

    feeding = asyncio.ensure_future(feed())
    out, err = await asyncio.gather(proc.stdout.read(), proc.stderr.read())
    await feeding
    await proc.wait()
    return out, err


async def grade_run_off_loop(
    instance_id: str,
    output: str,
    exit_code: int | None,
    parser: str,
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
    *,
    xfail_ok: Collection[str] = (),
    timed_out: bool = False,
    truncated: bool = False,
    junit: bytes | None = None,
    py_paths: Collection[str] | None = None,
):
    """:func:`crf_prime.swe.grading.grade_run` in a child process (same arguments, same :class:`GradeReport`)."""
    from crf_prime.swe.grading import GradeReport

    args = {
        "instance_id": instance_id,
        "exit_code": exit_code,
        "parser": parser,
        "fail_to_pass": list(fail_to_pass),
        "pass_to_pass": list(pass_to_pass),
        "xfail_ok": None if xfail_ok is None else list(xfail_ok),
        "timed_out": timed_out,
        "truncated": truncated,
        "py_paths": None if py_paths is None else sorted(py_paths),
    }
    return GradeReport.model_validate(await _call("grade", args, output, junit))


async def failure_messages_off_loop(log: str) -> dict[str, str]:
    """:func:`crf_prime.swe.logparse.failure_messages` in a child process."""
    got = await _call("messages", {}, log, None)
    assert isinstance(got, dict)
    return got


def _serve() -> int:
    """The child: read one request from stdin, write the answer to stdout."""
    from crf_prime.swe.grading import grade_run
    from crf_prime.swe.logparse import failure_messages

    data = sys.stdin.buffer
    head = json.loads(data.readline())
    junit = data.read(head["junit_bytes"]) if head["junit_bytes"] >= 0 else None
    log = data.read().decode(*_CODEC)
    if head["op"] == "messages":
        answer: object = failure_messages(log)
    else:
        a = head["args"]
        report = grade_run(
            a["instance_id"],
            log,
            a["exit_code"],
            a["parser"],
            a["fail_to_pass"],
            a["pass_to_pass"],
            xfail_ok=a["xfail_ok"],
            timed_out=a["timed_out"],
            truncated=a["truncated"],
            junit=junit,
            py_paths=None if a["py_paths"] is None else set(a["py_paths"]),
        )
        answer = report.model_dump(mode="json")
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(_serve())
