"""Every TOML under configs/ parses and names only ids / import paths this repo provides; the ladder composes as
documented (A0 -> A4). The opt-in test_configs_prime_rl.py loads the same arms into prime-rl's real RLConfig."""

from __future__ import annotations

import importlib
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from ladder_arms import ARMS, CONFIGS, LADDER, REPO, compose

from crf_prime.hints import HINT_KEY

TOMLS = sorted(CONFIGS.rglob("*.toml"))
BUILTIN_HARNESSES = {"null", "bash"}
CRF_HARNESSES = {"crf-sandbox": REPO / "crf_sandbox" / "__init__.py"}
"""Harness ids this repo ships outside environments/ (module alias of crf_prime.harness)."""


def walk(node: object, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], object]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*path, key), value
            yield from walk(value, (*path, key))
    elif isinstance(node, list):
        for item in node:
            yield from walk(item, path)


def env_package(env_id: str) -> Path:
    return REPO / "environments" / env_id.replace("-", "_")


def is_env(env_id: str) -> bool:
    """An environments/ package whose distribution name is the id (what `prime env install` / pip resolve)."""
    pyproject = env_package(env_id) / "pyproject.toml"
    return pyproject.is_file() and tomllib.loads(pyproject.read_text())["project"]["name"] == env_id


def test_configs_exist():
    for files in ARMS.values():
        assert all((LADDER / f).is_file() for f in files), files


@pytest.mark.parametrize("path", TOMLS, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_toml_parses_and_references_exist(path: Path):
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        pytest.fail(f"{path}: {e}")
    for keys, value in walk(data):
        where = f"{path.relative_to(REPO)}: {'.'.join(keys)} = {value!r}"
        if keys[-2:] == ("taskset", "id"):
            assert is_env(value), f"{where}: no environments/ package with this distribution name"
        elif keys[-2:] == ("harness", "id"):
            known = value in BUILTIN_HARNESSES or is_env(value) or CRF_HARNESSES.get(value, REPO / "-").is_file()
            assert known, f"{where}: not a built-in harness, a crf-prime harness or an environment"
        elif keys[-1] == "import_path":
            module, _, attr = value.rpartition(".")
            assert module.split(".")[0] in {"crf_prime", "loss_fns"}, f"{where}: not a crf-prime import path"
            assert callable(getattr(importlib.import_module(module), attr, None)), f"{where}: not a callable"


def sources(cfg: dict) -> list[tuple[str, str, str]]:
    """(name, taskset id, algo type or "" when inherited) of each train source."""
    return [
        (s["name"], s["env"]["taskset"]["id"], s.get("algo", {}).get("type", ""))
        for s in cfg["orchestrator"]["train"]["source"]
    ]


def test_ladder_arms_compose_to_the_documented_channels():
    a0, a1, a2, a3, a4 = (compose(a) for a in ("A0", "A1", "A2", "A3", "A4"))
    assert "loss" not in a0.get("trainer", {})  # prime-rl's default loss
    assert sources(a0) == [("featdel", "feature-deletion", "")]
    custom = {"type": "custom", "import_path": "loss_fns.policy.dr_grpo", "kwargs": {"clip_low": 0.2, "clip_high": 0.2}}
    for arm in (a1, a2, a3, a4):
        assert arm["trainer"]["loss"] == custom
        assert arm["orchestrator"]["group_size"] == 8 and arm["model"] == a0["model"]  # base survives the overlays
    assert sources(a1) == sources(a0)
    assert sources(a2) == [("featdel", "feature-deletion", ""), ("featdel-hints", "feature-deletion", "opsd")]
    assert sources(a3) == [("featdel", "feature-deletion", ""), ("replay", "trace-replay", "")]
    assert sources(a4) == [*sources(a2), ("replay", "trace-replay", "")]
    for arm in (a0, a1, a2, a3, a4):  # every Feature Deletion train source draws the same tasks; eval is held out
        featdel = [s for s in arm["orchestrator"]["train"]["source"] if s["env"]["taskset"]["id"] == "feature-deletion"]
        assert {s["env"]["taskset"]["tasks"] for s in featdel} == {"tasks/featdel-train"}
        assert {s["env"]["agent"]["harness"]["id"] for s in featdel} == {"crf-sandbox"}
        assert arm["orchestrator"]["eval"]["source"][0]["env"]["taskset"]["tasks"] == "tasks/featdel-eval"
    assert [a["run"]["name"] for a in (a0, a1, a2, a3, a4)] == [
        "a0-rlvr",
        "a1-dr-grpo",
        "a2-hints",
        "a3-replay",
        "a4-all",
    ]


@pytest.mark.parametrize("arm", ["A2", "A4"])
def test_opsd_sources_read_the_hint_that_attach_hint_writes(arm: str):
    (opsd,) = [s for s in compose(arm)["orchestrator"]["train"]["source"] if s.get("algo", {}).get("type") == "opsd"]
    assert opsd["algo"]["demo_key"] == HINT_KEY
    assert opsd["algo"]["template"].format(demonstration="- fix it").endswith("\n- fix it")
    assert opsd["group_size"] == 1


def test_slurm_overlay_layers_on_a_ladder_arm():
    """configs/multinode/slurm.toml (multinode team) on top of A1: multi-node deployment, the arm's loss untouched."""
    cfg = compose("A1-slurm")
    assert cfg["deployment"]["type"] == "multi_node" and "slurm" in cfg
    assert cfg["trainer"]["loss"]["import_path"] == "loss_fns.policy.dr_grpo"
    assert cfg["run"]["name"] == "a1-dr-grpo"


def env_tables(data: dict) -> Iterator[tuple[str, dict]]:
    """(split/name, env table) of every train and eval source of a prime-rl TOML."""
    for split in ("train", "eval"):
        for source in data.get("orchestrator", {}).get(split, {}).get("source", []):
            yield f"{split}/{source.get('name', '?')}", source.get("env", {})


@pytest.mark.parametrize("path", TOMLS, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_source_env_tables_validate_with_verifiers(path: Path):
    """Each source's `env` table validates as verifiers' own env config (taskset narrowed to the environment's config
    class, harness to its config class, extra keys forbidden) — the check prime-rl's EnvConfig runs, without prime-rl."""
    import verifiers.v1 as vf
    from pydantic import ValidationError

    for where, env in env_tables(tomllib.loads(path.read_text())):
        try:
            cfg = vf.SingleAgentEnvConfig.model_validate(env)
        except (ValidationError, ModuleNotFoundError, TypeError, ValueError) as e:
            pytest.fail(f"{path.relative_to(REPO)} [{where}]: {e}")
        assert type(cfg.taskset).__module__.split(".")[0] == cfg.taskset.id.replace("-", "_"), where
