"""Rehearse ladder arms of a real prime-rl run on CPU: prime-rl's own orchestrator and env-server processes, our
configs composed by prime-rl's launcher (``rl @ ... --dry-run`` writes the exact sub-configs ``uv run rl`` starts its
processes with), and two stand-ins for the GPU parts (scripts/rehearse/inference_server.py, trainer.py).

    bash scripts/rehearse/run.sh            # builds the venv once, then runs this with it

Prints one table per arm and step and writes ``<work>/report.json``. Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
LADDER = REPO / "configs" / "ladder"
TASKSETS = HERE / "tasksets"
OBJECTIVES = ("ppo_clip", "dr_grpo", "dapo", "gspo", "cispo")
"""The policy objectives of loss_fns.policy, each rehearsed as a learning arm ``learn-<objective>``."""


@dataclass(frozen=True)
class Arm:
    """One rehearsed arm: the files composed onto each other (ladder files, then overlays), the policy the
    inference stand-in runs, and the tiny model it starts from."""

    files: tuple[Path, ...]
    policy: str = "script"
    model: str = "model"
    loss: str | None = None
    """loss_fns.policy objective set as prime-rl's custom loss (learning arms; None: the files' loss)."""
    swe: bool = False
    """The scripted policy also answers SWE-bench tasks (the mini fixture under ``<work>/swe-mini``)."""
    live: bool = False
    """Channel 3 and the hint writer live: the replay source asks crf-prime's live (Ray) teacher pool at scoring time,
    the hint source's hints are written by an LLM through a live pool, both against loopback teachers under a budget
    that binds (see start_live)."""
    eval: bool = False
    """Run the eval pass (eval.toml: v0 and once more before the end) and build `crf-prime report` from the run dir."""
    relay: bool = False
    """Decentralized on one machine: weights reach the inference stand-in only through crf-prime's relay (see
    start_relay)."""
    min_steps: int = 1
    """Fewest steps the arm runs whatever --steps says (A4: prime-rl's seeded source draw first reaches the replay
    source at step 6-8 at this batch size, so 5 steps would fail the every-source-trained check)."""


A4_LIVE_STEPS = 12
"""A4-live's fewest steps: the live replay cap binds from the third state asked on (two states' calls fit it), and
prime-rl's seeded source draw (``random.Random(42)`` over A4's ratios) reaches its third replay group after ~93
rollouts, ~12 batches of 8; at 8 steps a run asked 2 states and the cap did not bind."""


def _ladder(*names: str) -> tuple[Path, ...]:
    return (*(LADDER / n for n in names), HERE / "cpu.toml")


_LEARN = (LADDER / "a0_rlvr.toml", HERE / "cpu.toml", HERE / "learn.toml")
ARMS: dict[str, Arm] = {
    # the ladder on Feature Deletion (+ replay), scripted policy: the plumbing checks need its known plans
    "a0": Arm((*_ladder("a0_rlvr.toml"), HERE / "eval.toml"), eval=True),
    "a1": Arm(_ladder("a0_rlvr.toml", "a1_dr_grpo.toml")),
    "a2": Arm(_ladder("a0_rlvr.toml", "a1_dr_grpo.toml", "a2_hints.toml")),
    "a3": Arm(_ladder("a0_rlvr.toml", "a1_dr_grpo.toml", "a3_replay.toml")),
    "a4": Arm(_ladder("a0_rlvr.toml", "a1_dr_grpo.toml", "a4_all.toml"), min_steps=8),
    # the same arms with the live teacher pool (A3/A4) and the LLM hint writer (A2/A4), loopback teachers
    "a2-live": Arm(_ladder("a0_rlvr.toml", "a1_dr_grpo.toml", "a2_hints.toml"), live=True),
    "a3-live": Arm(_ladder("a0_rlvr.toml", "a1_dr_grpo.toml", "a3_replay.toml"), live=True),
    "a4-live": Arm(_ladder("a0_rlvr.toml", "a1_dr_grpo.toml", "a4_all.toml"), live=True, min_steps=A4_LIVE_STEPS),
    # A1 on the swebench-lite environment over the offline mini SWE-bench (scripted: gold patch or give up)
    "swe": Arm((*_ladder("a0_rlvr.toml", "a1_dr_grpo.toml"), HERE / "swebench.toml"), swe=True),
    # A0 decentralized on one machine: broadcasts relayed by `crf-prime relay serve` / `relay pull` to a node dir
    "relay": Arm(_ladder("a0_rlvr.toml"), relay=True),
    # learning arms: the sampling policy on the echo taskset, prime-rl's default loss and each objective
    "learn-a0": Arm(_LEARN, policy="sample", model="echo_model"),
    **{f"learn-{o}": Arm(_LEARN, policy="sample", model="echo_model", loss=o) for o in OBJECTIVES},
}
LEARN_ARMS = [name for name in ARMS if name.startswith("learn-")]
GROUPS: dict[str, list[str]] = {
    "ladder": ["a0", "a1", "a2", "a3", "a4"],
    "live": ["a2-live", "a3-live", "a4-live"],
    "learn": LEARN_ARMS,
}
GROUPS["all"] = [*GROUPS["ladder"], "swe", "relay", *GROUPS["live"]]
"""Names --arms expands: ``all`` (the default) is every plumbing arm: the ladder, swebench-lite, the relayed arm and
the live arms; the learning arms run on their own (benchmarks/rehearsal_learning.py)."""
PYCACHE = Path(sys.prefix) / "rehearsal-pycache"
"""Where the rehearsal's processes write and read bytecode (PYTHONPYCACHEPREFIX): inside the rehearsal venv."""
FEATDEL_SOURCE = "pypi:inflection==0.5.1"
ECHO_SFT_TARGET = 0.97
"""Probe reward (one temperature-1 sample per string) at which the supervised start stops (tiny_model.sft_echo): the
model echoes."""
ECHO_LOGIT_SCALE = 0.8
"""Then its logits are scaled by this (tiny_model.flatten_logits): learn.toml's temperature 2.0 draws what the tuned
model draws at 2.5 (prime-rl caps temperature at 2), a mean reward of ~0.37 that RL raises by sharpening."""


def free_port_block(size: int) -> int:
    """A base port with ``size`` consecutive free loopback ports, below the kernel's ephemeral range (outgoing
    connections take ephemeral ports and could grab a port between this check and the bind)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(500):
        base = rng.randrange(15000, low - size)
        held: list[socket.socket] = []
        try:
            for p in range(base, base + size):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", p))
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
        return base
    raise RuntimeError("no block of free loopback ports")


def run(cmd: list[str], **kw) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def prepare(work: Path, arms: list[str]) -> dict[str, Path]:
    """What the arms need, made once and reused: the Feature Deletion tasks, the replay inputs and the tiny model
    (scripted arms), the echo-tuned tiny model (learning arms)."""
    inputs: dict[str, Path] = {}
    if any(ARMS[a].policy == "script" for a in arms):
        inputs.update(prepare_featdel(work))
    if any(ARMS[a].swe for a in arms):
        swe = work / "swe-mini"
        if not (swe / "instances.jsonl").is_file():
            shutil.rmtree(swe, ignore_errors=True)
            run([str(Path(sys.executable).parent / "crf-prime"), "swe", "mini-fixture", "--out", str(swe)])
        inputs["swe_instances"] = swe / "instances.jsonl"
    if any(ARMS[a].model == "echo_model" for a in arms):
        echo_model = work / f"tiny-qwen2-echo-sft{ECHO_SFT_TARGET}-x{ECHO_LOGIT_SCALE}"
        if not (echo_model / "SFT_DONE").is_file():
            from tiny_model import build_tiny_model, flatten_logits, sft_echo

            sys.path.insert(0, str(TASKSETS))
            build_tiny_model(echo_model)
            done = sft_echo(echo_model, target_reward=ECHO_SFT_TARGET)
            flatten_logits(echo_model, ECHO_LOGIT_SCALE)
            (echo_model / "SFT_DONE").write_text(json.dumps({**done, "logit_scale": ECHO_LOGIT_SCALE}))
        inputs["echo_model"] = echo_model
    return inputs


def prepare_featdel(work: Path) -> dict[str, Path]:
    """Feature Deletion task directory, replay inputs and the tiny model of the scripted arms."""
    bin_dir = Path(sys.executable).parent
    tasks = work / "tasks" / "featdel-train"
    if not (tasks / "tasks.jsonl").is_file():
        run([str(bin_dir / "crf-prime"), "featdel", "generate", "--source", FEATDEL_SOURCE, "--max-tasks", "4",
             "--out", str(tasks)])  # fmt: skip
    eval_tasks = work / "tasks" / "featdel-eval"
    if not eval_tasks.exists():
        eval_tasks.symlink_to(tasks)
    states, journal = work / "replay" / "states.jsonl", work / "replay" / "run" / "journal.jsonl"
    if not journal.is_file():
        sys.path.insert(0, str(REPO / "tests" / "traces"))
        from replay_support import write_replay_inputs  # the tested fixture: 5 Claude Code states, 4 teachers

        journal.parent.mkdir(parents=True, exist_ok=True)
        s, j, _ = write_replay_inputs(work / "replay")
        shutil.move(j, journal)
        assert s == states
    model = work / "tiny-qwen2"
    if not (model / "model.safetensors").is_file():
        from tiny_model import build_tiny_model

        build_tiny_model(model)
    return {"tasks": tasks / "tasks.jsonl", "states": states, "journal": journal, "model": model}


CISPO_RATIO_MAX = 1.28
"""CISPO's weight bound in the learning arm (``ratio_max``; its default is 5.0, ScaleRL's): at lr 1e-3 and one step of
lag a token's ratio passed 5 on one step of one of two 15-step runs, so the clip ran in one run of two. 1.28 is DAPO's
clip-higher bound (1 + 0.28); in the same runs ppo_clip's 1 ± 0.2 clipped up to 8-11 % of a step's tokens."""
LOSS_KWARGS = {"cispo": {"ratio_max": CISPO_RATIO_MAX}}
"""``[trainer.loss.kwargs]`` of a learning arm's objective, where the rehearsal departs from the defaults."""


def loss_overlay(work: Path, objective: str) -> Path:
    """A TOML overlay setting loss_fns.policy.<objective> as prime-rl's custom rl loss (its default kwargs, except
    LOSS_KWARGS)."""
    path = work / "overlays" / f"loss-{objective}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = f'[trainer.loss]\ntype = "custom"\nimport_path = "loss_fns.policy.{objective}"\n'
    kwargs = LOSS_KWARGS.get(objective, {})
    if kwargs:
        text += "\n[trainer.loss.kwargs]\n" + "".join(f"{k} = {v!r}\n" for k, v in kwargs.items())
    path.write_text(text)
    return path


class Procs:
    """The processes of one arm, each in its own session so that a stop reaches its children."""

    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir, self.env, self.procs = log_dir, env, {}

    def start(self, name: str, cmd: list[str], cwd: Path) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "w")  # noqa: SIM115 -- closed with the process
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.procs[name] = proc
        return proc

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def marked_processes(marker: str, sessions: frozenset[int] = frozenset()) -> list[str]:
    """Live processes carrying this run's marker in their environment (bwrap keeps its caller's environment) or in one
    of ``sessions`` (each started process leads its own): prime-rl retitles its orchestrator and env servers
    (``PRIME-RL::Orchestrator``), which blanks their environment in /proc, so the marker alone misses them. A zombie
    (exited, not yet reaped by its new parent: in a container's init that can take a while) is not alive."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            if fields[0] in ("Z", "X"):
                continue
            session = int(fields[3])
            if session in sessions or marker.encode() in (d / "environ").read_bytes():
                cmdline = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{d.name} {cmdline[:120]}")
        except OSError:
            continue
    return found


def leftover_processes(marker: str, sessions: frozenset[int], grace_s: float = 15.0) -> list[str]:
    """marked_processes, given ``grace_s`` to exit: a process whose parent was just killed may still be exiting."""
    deadline = time.monotonic() + grace_s
    while (found := marked_processes(marker, sessions)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return found


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds: user + system of the process itself) of every live process."""
    tick = os.sysconf("SC_CLK_TCK")
    table = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        table[int(d.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    return table


class CpuMeter:
    """CPU seconds by role of the process trees a Procs started, sampled while they run: a process keeps its last
    reading after it exits. Follows the tree, not the run's marker: prime-rl retitles its processes
    (``PRIME-RL::Orchestrator``), which overwrites their environment in /proc."""

    def __init__(self) -> None:
        self.last: dict[int, tuple[str, float]] = {}

    def sample(self, procs: Procs) -> None:
        table = _proc_table()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        for name, proc in procs.procs.items():
            role = name.split("-")[0]  # inference-<arm>, env-<split>-<source>, orchestrator, trainer
            stack = [proc.pid]
            while stack:
                pid = stack.pop()
                if pid in table:
                    self.last[pid] = (role, table[pid][1])
                    stack += children.get(pid, [])

    def by_role(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for role, cpu in self.last.values():
            out[role] = out.get(role, 0.0) + cpu
        return {r: round(v, 1) for r, v in sorted(out.items())}


SAMPLE_EVERY_S = 5.0
"""How often the CPU meters read /proc while arms run."""


@dataclass
class Launched:
    """One arm: composed by prime-rl's launcher, then its processes started and not yet reported."""

    arm: str
    steps: int
    run_dir: Path
    orch: dict
    hint_sources: list[str]
    procs: Procs
    marker: str
    t0: float
    ports: tuple[int, int] = (0, 0)
    """The inference stand-in's router and admin ports."""
    relay_ports: tuple[int, int] = (0, 0)
    """Relayed arms: the node's admin gate and the relay server."""
    status: str = "running"
    wall: float = 0.0
    compose_s: float = 0.0
    """Seconds prime-rl's launcher took to compose the arm (``rl ... --dry-run``)."""
    started_at: float = 0.0
    """Wall clock (epoch seconds) when the arm's orchestrator and trainer started."""
    cpu: CpuMeter = field(default_factory=CpuMeter)
    """CPU seconds by role of the arm's own processes."""
    sampled_at: float = 0.0

    @property
    def completions(self) -> Path:
        return self.run_dir / "rehearsal-logs" / "completions.jsonl"


def _env(run_name: str) -> tuple[dict[str, str], str]:
    """The processes' environment (taskset and shim paths, a marker naming the run) and the marker."""
    marker = uuid.uuid4().hex
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    # Bytecode in one cache beside the venv (source trees stay clean): with PYTHONDONTWRITEBYTECODE set and no .pyc
    # in the venv, every process compiled every module it imported; the orchestrator's import took 61 CPU s, 32 warm.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    env["CRF_REHEARSAL_RUN"] = marker
    env["PRL_RUN_ID"], env["PRL_RUN_NAME"] = uuid.uuid4().hex, run_name
    paths = [str(TASKSETS)]  # the echo taskset, for the env servers
    if subprocess.run([sys.executable, "-c", "import flash_attn"], capture_output=True, env=env).returncode != 0:
        paths.append(str(HERE / "shims"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (*paths, env.get("PYTHONPATH", "")) if p)
    return env, marker


def start_env_servers(procs: Procs, cfg_dir: Path, work: Path) -> None:
    """``env-server @ <cfg>`` for every train and eval source the launcher wrote."""
    bin_dir = Path(sys.executable).parent
    for split in ("train", "eval"):
        for cfg in sorted((cfg_dir / "envs" / split).glob("*.json")):
            procs.start(f"env-{split}-{cfg.stem}", [str(bin_dir / "env-server"), "@", str(cfg)], cwd=work)


def start_inference(
    procs: Procs,
    first: Launched,
    inputs: dict[str, Path],
    work: Path,
    name: str = "inference",
    wrap: tuple[str, ...] = (),
) -> None:
    """The run's inference stand-in process (one per arm: one process serving several arms' engines from threads
    dropped model calls with connection errors on a loaded 2-core box)."""
    spec = ARMS[first.arm]
    scripted = []  # what the scripted policy answers from
    if spec.policy == "script":
        scripted = ["--tasks", str(inputs["tasks"]), "--states", str(inputs["states"]),
                    "--journal", str(inputs["journal"])]  # fmt: skip
    if spec.swe:
        scripted += ["--swe-instances", str(inputs["swe_instances"])]
    procs.start(name, [*wrap, sys.executable, str(HERE / "inference_server.py"), "--model", str(inputs[spec.model]),
                              "--policy", spec.policy, "--served-model-name", first.orch["model"]["name"],
                              "--ports", *map(str, first.ports), *scripted, "--log", str(first.completions)],
               cwd=work)  # fmt: skip


def _compose_args(
    arm: str,
    inputs: dict[str, Path],
    work: Path,
    steps: int,
    ports: tuple[int, ...],
    extra: tuple[str, ...],
    env_base: int,
) -> list[str]:
    """The launcher's arguments for the arm (``rl <these>``): its files, then the rehearsal's command-line settings
    (``ports``: router, backend, rollout transport, the relay gate)."""
    router, backend, zmq_port, gate = ports
    spec = ARMS[arm]
    files = [*spec.files, *([loss_overlay(work, spec.loss)] if spec.loss else [])]
    if spec.live:
        files.append(live_overlay(spec.files, live_dir(work, arm)))
    args: list[str] = []
    for f in files:
        args += ["@", str(f)]
    if spec.relay:  # admin calls (pause / update_weights / resume) go to the node's relay gate, not the engine
        args += ["--orchestrator.model.client.admin-base-url", f"http://localhost:{gate}/v1"]
    if spec.policy == "sample" or spec.eval:  # the eval pass: at v0 and once more before the end
        args += ["--orchestrator.eval.interval", str(max(1, steps - 1))]
    args += ["--model.name", str(inputs[spec.model]), "--output-dir", str(work / "outputs"),
             "--run.name", f"rehearsal-{arm}", "--max-steps", str(steps), "--no-monitors.wandb",
             "--inference.server.port", str(router), "--inference.backend-port", str(backend),
             "--orchestrator.model.client.base-url", f"http://localhost:{router}/v1",
             "--rollout-transport.port", str(zmq_port), "--orchestrator.env-server-base-port", str(env_base),
             "--clean", "--dry-run", *extra]  # fmt: skip
    return args


def compose_arms(
    arms: list[str], inputs: dict[str, Path], work: Path, steps: int, *, extra: tuple[str, ...] = (), env_base: int
) -> list[Launched]:
    """Compose the arms with prime-rl's launcher (``rl ... --dry-run``: the sub-configs ``uv run rl`` would start its
    processes with), the orchestrators' env servers at ``env_base``, all in one process (compose.py: the launcher's
    imports once, not per arm). Starts nothing."""
    plans = []
    for arm in arms:
        base = free_port_block(6)
        ports = (base, base + 1, base + 2, base + 4, base + 5)  # router, backend, zmq, relay gate, relay server
        arm_steps = max(steps, ARMS[arm].min_steps)
        env, marker = _env(f"rehearsal-{arm}")
        args = _compose_args(arm, inputs, work, arm_steps, ports[:4], extra, env_base)
        plans.append((arm, arm_steps, ports, env, marker, args))
    jobs = [{"args": args, "env": {k: env[k] for k in ("PRL_RUN_ID", "PRL_RUN_NAME")}} for *_, env, _, args in plans]
    jobs_file = work / "overlays" / f"compose-{uuid.uuid4().hex[:8]}.json"
    jobs_file.parent.mkdir(parents=True, exist_ok=True)
    jobs_file.write_text(json.dumps(jobs, indent=1))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(HERE / "compose.py"), str(jobs_file)], capture_output=True, text=True,
                          cwd=work, env=plans[0][3])  # fmt: skip
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"composing {', '.join(arms)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                           f"{proc.stderr[-3000:]}")  # fmt: skip
    seconds = [json.loads(line)["seconds"] for line in proc.stdout.splitlines() if line.startswith('{"job"')]
    seconds[0] += wall - sum(seconds)  # the first arm carries the process's start-up and imports
    out = []
    for (arm, arm_steps, ports, env, marker, _), compose_s in zip(plans, seconds, strict=True):
        run_dir = work / "outputs" / f"rehearsal-{arm}"
        orch = json.loads((run_dir / "configs" / "orchestrator.json").read_text())
        hint_sources = [s["name"] for s in orch["train"]["source"] if s["algo"]["type"] == "opsd"]
        log_dir = run_dir / "rehearsal-logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        launched = Launched(arm, arm_steps, run_dir, orch, hint_sources, Procs(log_dir, env), marker, t0, ports[:2])
        launched.relay_ports = ports[3:5]
        launched.compose_s = round(compose_s, 1)
        out.append(launched)
    return out


def start_arm(run: Launched, work: Path) -> None:
    """The arm's orchestrator (prime-rl's) and trainer stand-in."""
    bin_dir = Path(sys.executable).parent
    cfg_dir = run.run_dir / "configs"
    sample = ARMS[run.arm].policy == "sample"
    run.started_at = time.time()
    run.procs.start("orchestrator", [str(bin_dir / "orchestrator"), "@", str(cfg_dir / "orchestrator.json")], cwd=work)
    run.procs.start("trainer", [sys.executable, str(HERE / "trainer.py"), str(cfg_dir / "trainer.json"),
                                "--completions", str(run.completions), *(["--compare-objectives"] if sample else []),
                                "--hint-sources", *run.hint_sources], cwd=work)  # fmt: skip


LIVE_POOL = "crf-rehearsal"
"""Name of the live teacher pool the replay source asks (task.live_pool)."""
HINT_POOL = "crf-rehearsal-hints"
"""Name of the live pool the hint writer serves from the first env-server process that writes a hint."""
LIVE_HINT = "Restore the deleted function from its docstring and its callers; run the tests before you submit."
"""What the loopback hint writer answers (found in trace.info["hint"] when the LLM wrote the hint)."""
LIVE_ACTION = {"name": "bash", "arguments": json.dumps({"command": "echo unrelated"})}  # policy.UNRELATED
"""What every loopback replay teacher answers: the consensus, which the scripted policy's ``replay_other`` plan
matches (reward 1) and its recorded-teacher plans do not."""
LIVE_TEACHERS = (("loop-qwen", "qwen"), ("loop-deepseek", "deepseek"), ("loop-openai", "openai"))
"""Replay teachers (name, model family): none of the fixture traces' own family (anthropic), so all three vote."""
LIVE_PRICE_PER_MTOK = 1.0
"""USD per 1M tokens in and out, for the loopback servers' bills and the pool's worst-case reservations."""
LIVE_REPLAY_BUDGET_USD = 0.003
"""The replay pool's job cap. The ledger refuses a call once what was spent plus the call's worst case (request bytes
as tokens plus max_tokens, at the price above: 0.0016-0.0026 USD at the fixture's states) exceeds the cap, and holds
it while reservations in flight would. The loopback server bills ~0.00025 USD a call, so the first calls go through
(one or two at a time) and after about six the cap refuses every state. 0.006 did not bind: A3-live's 5 steps asked
3 states, 9 calls, 0.0023 USD."""
LIVE_HINT_BUDGET_USD = 0.015
"""The hint writer's cap (job and per episode): a few hints (each reserves ~0.007 USD, is billed ~0.002), then
episodes keep the templated hint (trace.info["hint_error"] says why)."""
LIVE_MAX_TOKENS = {"replay": 64, "hints": 256}
"""max_tokens per call: a replay teacher answers one tool call, the hint writer a few sentences."""


def live_dir(work: Path, arm: str) -> Path:
    """The live arm's teachers file, loopback replies, pool journals and Ray address (kept out of the run dir, which
    the launcher's --clean empties)."""
    return work / "live" / arm


def live_overlay(files: tuple[Path, ...], where: Path) -> Path:
    """A JSON overlay (prime-rl's launcher reads JSON like TOML) restating the arm's train sources with the replay
    source asking the live pool instead of the journal, and the hint sources' hints written by the LLM hint writer
    through its own live pool. Lists replace wholesale under ``@``, hence the restated list."""
    import copy
    import tomllib

    sources = None
    for f in files:
        doc = tomllib.loads(f.read_text())
        sources = (doc.get("orchestrator", {}).get("train") or {}).get("source", sources)
    if sources is None:
        raise ValueError(f"no [[orchestrator.train.source]] in {[f.name for f in files]}")
    sources = copy.deepcopy(sources)
    for src in sources:
        taskset = src["env"]["taskset"]
        if taskset["id"] == "trace-replay":
            taskset.pop("journal", None)
            taskset.setdefault("task", {})["live_pool"] = LIVE_POOL
        if (src.get("algo") or {}).get("type") == "opsd":
            taskset.setdefault("task", {})["hint_writer"] = {
                "teachers": str(where / "hint-teachers.toml"),
                "name": "loop-hints",
                "journal": str(where / "hints-journal.jsonl"),
                "live": HINT_POOL,
                "budget_usd": LIVE_HINT_BUDGET_USD,
                "per_episode_usd": LIVE_HINT_BUDGET_USD,
                "max_tokens": LIVE_MAX_TOKENS["hints"],
            }
    where.mkdir(parents=True, exist_ok=True)
    path = where / "overlay.json"
    path.write_text(json.dumps({"orchestrator": {"train": {"source": sources}}}, indent=1))
    return path


def teachers_toml(teachers: list[tuple[str, str]], url: str, budget_usd: float, max_tokens: int) -> str:
    """A teachers file: ``teachers`` (name, model family) served by one loopback server billing at
    LIVE_PRICE_PER_MTOK, under a job cap of ``budget_usd``. No reserved chat-template overhead: the loopback server
    bills the request's characters, not a template's tokens."""
    out = [f"[budget]\njob_usd = {budget_usd}\n"]
    for name, family in teachers:
        out.append(
            f'[[teachers]]\nname = "{name}"\nmodel = "{name}"\nbase_url = "{url}/v1"\napi_key_var = ""\n'
            f'model_family = "{family}"\nprice_in_per_mtok = {LIVE_PRICE_PER_MTOK}\n'
            f"price_out_per_mtok = {LIVE_PRICE_PER_MTOK}\nmax_concurrency = 2\ntimeout_s = 60\nmax_attempts = 2\n"
            f"reserve_prompt_overhead_tokens = 0\n[teachers.sampling]\nmax_tokens = {max_tokens}\n"
        )
    return "\n".join(out)


def _wait_file(path: Path, proc: subprocess.Popen, what: str, timeout_s: float = 180.0) -> str:
    deadline = time.monotonic() + timeout_s
    while not (path.is_file() and path.read_text().strip()):
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode}) before it was ready")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {timeout_s:.0f} s")
        time.sleep(0.2)
    return path.read_text().strip()


def start_live(run: Launched, work: Path) -> None:
    """Loopback teachers (one server for the replay teachers, one for the hint writer, both billing), the live teacher
    pool on a Ray cluster of its own (teacher_pool.py), and RAY_ADDRESS for the env servers that attach to it."""
    bin_dir = Path(sys.executable).parent
    where = live_dir(work, run.arm)
    # the journals' write-ahead intents too: a call still in flight when the last run's pool stopped stays there, and
    # the next pool books it as "possibly paid, answer lost" at its reservation (so a rerun in the same --work started
    # over its caps and answered nothing)
    journals = [
        f"{name}{suffix}" for name in ("pool-journal", "hints-journal") for suffix in (".jsonl", ".intents.jsonl")
    ]
    for stale in (*journals, "replay.url", "hints.url", "ray.address"):
        (where / stale).unlink(missing_ok=True)
    (where / "replay-replies.jsonl").write_text(json.dumps({"tool_calls": [LIVE_ACTION]}) + "\n")
    (where / "hint-replies.jsonl").write_text(json.dumps({"content": LIVE_HINT}) + "\n")
    urls = {}
    for kind in ("replay", "hints"):
        proc = run.procs.start(f"teacher-{kind}", [str(bin_dir / "crf-prime"), "loopback", "serve",
                               "--replies", str(where / f"{kind.removesuffix('s')}-replies.jsonl"), "--cycle",
                               "--ready-file", str(where / f"{kind}.url"),
                               "--billing.price-in-per-mtok", str(LIVE_PRICE_PER_MTOK),
                               "--billing.price-out-per-mtok", str(LIVE_PRICE_PER_MTOK)], cwd=work)  # fmt: skip
        urls[kind] = _wait_file(where / f"{kind}.url", proc, f"loopback {kind} teacher").removesuffix("/v1")
    replay = teachers_toml(list(LIVE_TEACHERS), urls["replay"], LIVE_REPLAY_BUDGET_USD, LIVE_MAX_TOKENS["replay"])
    (where / "teachers.toml").write_text(replay)
    hints = teachers_toml([("loop-hints", "mistral")], urls["hints"], LIVE_HINT_BUDGET_USD, LIVE_MAX_TOKENS["hints"])
    (where / "hint-teachers.toml").write_text(hints)
    pool = run.procs.start("teacher-pool", [sys.executable, str(HERE / "teacher_pool.py"),
                           "--teachers", str(where / "teachers.toml"), "--journal", str(where / "pool-journal.jsonl"),
                           "--name", LIVE_POOL, "--address-file", str(where / "ray.address")], cwd=work)  # fmt: skip
    run.procs.env["RAY_ADDRESS"] = _wait_file(where / "ray.address", pool, "the live teacher pool")
    run.procs.env["RAY_AUTH_MODE"] = "token"  # the cluster's token auth (ray >= 2.5x): clients read ~/.ray/auth_token


def node_dir(run: Launched) -> Path:
    """The relayed arm's inference "node": its own broadcast directory, which only `relay pull` writes."""
    return run.run_dir.parent / f"{run.run_dir.name}-node" / "broadcasts"


def start_relay(run: Launched, work: Path) -> tuple[str, ...]:
    """Decentralized on one machine: `crf-prime relay serve` publishes the trainer's broadcast directory, and a node
    (`relay pull` with its admin gate, and the inference stand-in) sees its own directory mounted at that same absolute
    path (bubblewrap bind mount), as configs/multinode/decentralized.toml requires of every inference node. The
    orchestrator's admin calls go to the gate, which holds each update until the relay has the step in the node's
    directory, then forwards it to the stand-in. Returns the command prefix that puts a process on the node."""
    bin_dir = Path(sys.executable).parent
    broadcasts, node = run.run_dir / "broadcasts", node_dir(run)
    data = node.parent.parent / f"{run.run_dir.name}-relay-data"
    for d in (node.parent, data):
        shutil.rmtree(d, ignore_errors=True)
    for d in (broadcasts, node, data):
        d.mkdir(parents=True, exist_ok=True)
    gate, server = run.relay_ports
    run.procs.start("relay-serve", [str(bin_dir / "crf-prime"), "relay", "serve", "--broadcast-dir", str(broadcasts),
                                    "--data-dir", str(data), "--port", str(server), "--poll", "0.2"], cwd=work)  # fmt: skip
    wrap = ("bwrap", "--dev-bind", "/", "/", "--bind", str(node), str(broadcasts), "--die-with-parent", "--")
    run.procs.start("relay-pull", [*wrap, str(bin_dir / "crf-prime"), "relay", "pull",
                                   "--server", f"http://127.0.0.1:{server}", "--broadcast-dir", str(broadcasts),
                                   "--gate.upstream", f"http://127.0.0.1:{run.ports[1]}", "--gate.port", str(gate),
                                   "--poll", "1"], cwd=work)  # fmt: skip
    return wrap


def launch_arm(arm: str, inputs: dict[str, Path], work: Path, steps: int, *, extra: tuple[str, ...] = ()) -> Launched:
    """One arm with its own processes: inference stand-in, env servers, orchestrator, trainer stand-in (and, relayed,
    the relay's server and node)."""
    env_base = free_port_block(8)
    (run,) = compose_arms([arm], inputs, work, steps, extra=extra, env_base=env_base)
    try:
        wrap = start_relay(run, work) if ARMS[arm].relay else ()
        if ARMS[arm].live:
            start_live(run, work)
        start_inference(run.procs, run, inputs, work, wrap=wrap)
        start_env_servers(run.procs, run.run_dir / "configs", work)
        start_arm(run, work)
    except BaseException:
        run.procs.stop()
        raise
    return run


def poll_arm(run: Launched, timeout_s: float) -> bool:
    """Update the arm's status; True once it is over (finished, failed or timed out)."""
    trainer, orchestrator = run.procs.procs["trainer"], run.procs.procs["orchestrator"]
    elapsed = time.monotonic() - run.t0
    if trainer.poll() is not None and orchestrator.poll() is not None:
        run.status = "ok"
    elif dead := [n for n, p in run.procs.procs.items() if p.poll() not in (None, 0)]:
        run.status = f"failed: {', '.join(dead)} exited (see {run.run_dir / 'rehearsal-logs'})"
    elif trainer.poll() == 0 and elapsed > timeout_s:
        run.status = "ok"  # the trainer finished its steps; an orchestrator still evaluating is stopped
    elif elapsed > timeout_s:
        run.status = f"timeout after {timeout_s:.0f} s (see {run.run_dir / 'rehearsal-logs'})"
    else:
        if time.monotonic() - run.sampled_at >= SAMPLE_EVERY_S:
            run.cpu.sample(run.procs)
            run.sampled_at = time.monotonic()
        return False
    run.cpu.sample(run.procs)
    run.procs.stop()
    run.wall = time.monotonic() - run.t0
    return True


def arm_result(run: Launched, inputs: dict[str, Path]) -> dict:
    """The arm's report (report.arm_report) with its status, wall time and leftover processes."""
    from report import arm_report

    leftovers = leftover_processes(run.marker, frozenset(p.pid for p in run.procs.procs.values()))
    sources = [s["name"] for s in run.orch["train"]["source"]]
    report = arm_report(run.run_dir, run.steps, sources, run.hint_sources, inputs)
    report.update(arm=run.arm, status=run.status, wall_s=round(run.wall, 1), leftover_processes=leftovers)
    report.update(compose_s=round(run.compose_s, 1), started_at=run.started_at, cpu_s=run.cpu.by_role())
    report["policy"] = ARMS[run.arm].policy
    if ARMS[run.arm].eval:
        from report import eval_report

        report["eval"] = eval_report(run.run_dir, run.arm)
    if ARMS[run.arm].live:
        from report import live_report

        report["live"] = live_report(run.run_dir, live_dir(run.run_dir.parent.parent, run.arm), run.steps)
    if ARMS[run.arm].relay:
        from report import relay_report

        report["relay"] = relay_report(run.run_dir, node_dir(run))
    return report


def rehearse_arms(
    arms: list[str], inputs: dict[str, Path], work: Path, steps: int, timeout_s: float, extra: tuple[str, ...] = ()
) -> list[dict]:
    """Run ``arms``: one after the other, except that arms on the same sources (the learning arms) run side by side
    against one shared set of env servers, so their start-ups overlap and the env servers start once."""
    reports = []
    solo = [a for a in arms if ARMS[a].policy == "script"]
    together = [a for a in arms if ARMS[a].policy == "sample"]
    for arm in solo:
        run = launch_arm(arm, inputs, work, steps, extra=extra)
        while not poll_arm(run, timeout_s):
            time.sleep(1)
        time.sleep(1)
        reports.append(arm_result(run, inputs))
    if together:
        reports += rehearse_together(together, inputs, work, steps, timeout_s, extra)
    return reports


def rehearse_together(
    arms: list[str], inputs: dict[str, Path], work: Path, steps: int, timeout_s: float, extra: tuple[str, ...]
) -> list[dict]:
    """The arms side by side: composed first, then an inference stand-in per arm and one set of env servers (the
    first arm's composed configs) serving them all, then each arm's orchestrator and trainer start."""
    env_base = free_port_block(8)
    runs = compose_arms(arms, inputs, work, steps, extra=extra, env_base=env_base)
    env, _ = _env("rehearsal-shared")
    log_dir = work / "outputs" / "rehearsal-shared"
    log_dir.mkdir(parents=True, exist_ok=True)
    shared = Procs(log_dir, env)
    try:
        for r in runs:
            start_inference(shared, r, inputs, work, name=f"inference-{r.arm}")
        start_env_servers(shared, runs[0].run_dir / "configs", work)
        for r in runs:
            r.t0 = time.monotonic()
            start_arm(r, work)
        pending = list(runs)
        shared_cpu, sampled = CpuMeter(), 0.0
        while pending:
            if time.monotonic() - sampled >= SAMPLE_EVERY_S:
                shared_cpu.sample(shared)
                sampled = time.monotonic()
            pending = [r for r in pending if not poll_arm(r, timeout_s)]
            dead = [n for n, p in shared.procs.items() if p.poll() is not None]
            if dead:
                for r in pending:
                    r.procs.stop()
                    r.status = f"failed: shared {', '.join(dead)} exited (see {log_dir})"
                    r.wall = time.monotonic() - r.t0
                break
            time.sleep(1)
        shared_cpu.sample(shared)
    finally:
        for r in runs:
            r.procs.stop()
        shared.stop()
    time.sleep(1)
    shared_left = leftover_processes(env["CRF_REHEARSAL_RUN"], frozenset(p.pid for p in shared.procs.values()))
    reports = [arm_result(r, inputs) for r in runs]
    for rep in reports:
        rep["leftover_processes"] += shared_left
        rep["shared_cpu_s"] = shared_cpu.by_role()  # the inference stand-ins and env servers of all these arms together
    return reports


def expand_arms(names: list[str]) -> list[str]:
    """--arms with the groups expanded, each arm once, in the order given."""
    out: list[str] = []
    for name in names:
        out += [a for a in GROUPS.get(name, [name]) if a not in out]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--arms",
        nargs="+",
        default=["all"],
        choices=[*ARMS, *GROUPS],
        help="arms to rehearse, or groups: 'all' (default: ladder, swe, relay, live), 'ladder' (a0-a4), 'live' "
        "(a2-live, a3-live, a4-live), 'learn' (learn-a0 and learn-<objective>)",
    )
    parser.add_argument(
        "--steps", type=int, default=5, help="training steps per arm (the hint source of A2 first ships around step 3)"
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=Path(os.environ.get("CRF_REHEARSAL_WORK", Path.home() / ".cache/crf-prime/rehearsal-work")),
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per arm")
    parser.add_argument(
        "--rl-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for prime-rl's launcher, after the arm's files (repeat: --rl-arg=--trainer.optim.lr "
        "--rl-arg=1e-3)",
    )
    parser.add_argument("--report-only", action="store_true", help="re-read <work>/report.json's runs and print")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from report import arm_report, print_report

    if args.report_only:
        saved = json.loads((args.work / "report.json").read_text())
        inputs = prepare(args.work, [a["arm"] for a in saved["arms"]])
        for old in saved["arms"]:
            run_dir = args.work / "outputs" / f"rehearsal-{old['arm']}"
            new = arm_report(run_dir, len(old["steps"]), old["sources"], old["hint_sources"], inputs)
            old.update(new)
        (args.work / "report.json").write_text(json.dumps(saved, indent=1))
        return 0 if print_report(saved["arms"], saved["wall_s"]) else 1

    args.work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    arms = expand_arms(args.arms)
    inputs = prepare(args.work, arms)
    reports = rehearse_arms(arms, inputs, args.work, args.steps, args.timeout, tuple(args.rl_arg))
    total = time.monotonic() - t0
    (args.work / "report.json").write_text(json.dumps({"wall_s": round(total, 1), "arms": reports}, indent=1))
    ok = print_report(reports, total)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
