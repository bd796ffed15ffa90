"""init_ray keeps a SIGTERM handler the process had: ray.init on the main thread replaces it with sys.exit.

Ray installs its handler before it starts or joins a cluster, so the script joins the suite's shared Ray
(``ray_cluster``, tests/conftest.py) instead of starting one of its own (~8 CPU-s each)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("ray")

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    kw = dict(address=sys.argv[2], log_to_driver=False)
    if sys.argv[1] == "init_ray":
        from crf_prime.rayinit import init_ray
        init_ray(**kw)
    else:
        import ray
        ray.init(**kw)
    print("ours" if signal.getsignal(signal.SIGTERM) is interrupt else "replaced", flush=True)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100):  # the handler runs at the main thread's next check; bounded wait
            time.sleep(0.05)
        print("not interrupted", flush=True)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "handler", "outcome", "rc"),
    [("init_ray", "ours", "KeyboardInterrupt", 0), ("ray.init", "replaced", None, None)],
)
def test_init_ray_keeps_the_sigterm_handler_installed_before(ray_cluster, how, handler, outcome, rc):
    """With plain ``ray.init`` (the control) Ray's handler ends the process: with exit 15, or, under load, Ray's
    own shutdown may abort first (-6); either way our handler never ran."""
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, how, ray_cluster.address_info["address"]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stdout.split()
    assert lines[0] == handler, proc.stderr[-2000:]
    if rc is None:
        assert proc.returncode != 0 and "KeyboardInterrupt" not in lines, (proc.stdout, proc.stderr[-2000:])
    else:
        assert proc.returncode == rc and lines[-1] == outcome, (proc.stdout, proc.stderr[-2000:])
