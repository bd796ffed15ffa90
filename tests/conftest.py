"""Opt-in markers: each optional host is skipped with a reason that says how to enable it.

On CI (``CI=true``) the hosts that .ci/run installs (bubblewrap, ray) must be present: a missing one fails
the run instead of silently skipping the tests that cover it.

``slow`` marks what the fast subset (``-m "not slow"``, README) leaves out: tests marked in their module, every Ray
test (a local Ray takes seconds to start), and the tests below, each measured over 10 s on a loaded 2-core box.

One local Ray (the ``ray_cluster`` fixture) serves consecutive tests that ask for it: a start and stop costs ~8 CPU-s
and an idle Ray ~0.05 of a core, so it is shut down as soon as the next test does not ask for it. Those tests share
:data:`SHARED_RAY_TESTS`, which xdist hands to one worker as one unit (:func:`pytest_xdist_make_scheduler`).

One run directory (``$CRF_TEST_RUN_DIR``) serves every xdist worker: the controller creates it before the workers
start, so they inherit it; the featdel cache (``$CRF_PRIME_CACHE``: sdists, test venvs) and the generated task
directories live in it, each built once per run instead of once per worker.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import tempfile
from typing import Any

import pytest

ON_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _prime_rl_src() -> str | None:
    path = os.environ.get("CRF_PRIME_RL_SRC")
    return path if path and os.path.isdir(os.path.join(path, "src", "prime_rl")) else None


_HOSTS: dict[str, tuple[bool, str, bool]] = {
    # marker: (available, how to enable, required on CI)
    "prime_rl": (
        _prime_rl_src() is not None,
        "set CRF_PRIME_RL_SRC to a prime-rl source checkout and pip install 'crf-prime[prime-rl]'",
        False,
    ),
    "swebench": (
        bool(os.environ.get("CRF_TEST_SWEBENCH")) and importlib.util.find_spec("swebench") is not None,
        "pip install 'crf-prime[swebench]' and set CRF_TEST_SWEBENCH=1",
        False,
    ),
    "ray": (importlib.util.find_spec("ray") is not None, "pip install 'crf-prime[ray]'", True),
    "bwrap": (shutil.which("bwrap") is not None, "apt-get install bubblewrap", True),
}


SLOW_TESTS = frozenset(
    {
        "featdel/test_featdel_taskset_split.py::test_per_package_pick_is_bounded_seeded_and_order_preserving",
        "featdel/test_featdel_threads.py::test_bare_ast_parse_races_in_threads",
        "loopback/test_loopback_cli.py::test_command_runs_against_the_server_and_exits_with_its_code",
        "loopback/test_loopback_cli.py::test_replies_past_the_end_are_http_500_without_cycle",
        "docs/test_doc_commands.py::test_block_runs",
        "swe/test_swe_instances.py::test_hub_dataset_offline_or_without_the_hf_extra",
        "losses/test_losses_kwargs.py::test_kwargs_error_is_on_the_error_base_and_loads_no_cli",
        "configs/test_configs_check.py::test_every_ladder_arm_is_ready_to_launch",
        "sandbox/test_harness_tools.py::test_complete_reassembles_streamed_tool_calls",
        "hints/test_hints_writer_config.py::test_documented_hint_writer_table_validates_with_verifiers",
        "swe/test_swe_env.py::test_gold_resolves_and_untouched_repo_scores_zero_with_hint",
        "swe/test_swe_logparse_grading.py::test_real_pytest_ra_output",
        "report/test_report_ab.py::test_cli_writes_markdown_json_and_png",
    }
)
"""``path::test`` under tests/ (every parametrisation) of the unmarked tests the fast subset leaves out."""


LONGEST_FIRST = (
    "docs/test_doc_commands.py",
    "featdel/test_featdel_corpus.py",
    "featdel/test_featdel_generate.py",
    "featdel/test_featdel_equiv.py",
    "featdel/test_featdel_env.py",
    "traces/test_trace_replay_env.py",
    "teachers/test_teachers_ray.py",
    "swe/test_swe_hacks.py",
    "featdel/test_featdel_hacks.py",
    "featdel/test_featdel_replay.py",
    "test_rayinit.py",
    "swe/test_swe_vf_eval.py",
    "sandbox/test_harness_vf_eval.py",
    "swe/test_swe_env.py",
    "hints/test_hints_live_writer.py",
    "hub/test_hub_install.py",
)
"""Modules (under tests/) run first, in this order: those holding the longest tests (the slow subset's junit times,
2026-11-26). Handed out a few at a time (:func:`pytest_xdist_make_scheduler`; the shared-Ray unit goes first), the
two xdist workers take them at the start and finish together on the short tests. Only the order changes; a module's tests stay together (its fixtures are set
up once per worker)."""


RAY_NAMESPACE = "crf-prime-tests"
"""The shared Ray's driver namespace; tests that name actors pass their own namespace explicitly."""

SHARED_RAY_TESTS = (
    "teachers/test_teachers_ray.py::",
    "test_rayinit.py::",
    "hints/test_hints_live_writer.py::",
    "traces/test_trace_replay_env.py::test_live_pool_mode",
)
"""Node-id prefixes (under tests/) of exactly the tests that use ``ray_cluster`` (checked at collection): one xdist
unit, so one worker runs them back to back on one Ray. (xdist's own ``xdist_group`` needs ``--dist loadgroup``,
which pytest 9.2 breaks: it renames node ids through an attribute pytest no longer reads.)"""

RUN_DIR_VAR = "CRF_TEST_RUN_DIR"
"""Environment variable naming the per-run directory the workers share (set by the controller)."""


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or os.environ.get(RUN_DIR_VAR):
        return  # an xdist worker (or a pytest run inside a test): the controller's directory is inherited
    run_dir = tempfile.mkdtemp(prefix="crf-test-run-")
    os.environ[RUN_DIR_VAR] = run_dir
    os.environ.setdefault("CRF_PRIME_CACHE", os.path.join(run_dir, "cache"))  # a developer's own cache is kept
    config.add_cleanup(functools.partial(shutil.rmtree, run_dir, True))


class _SharedRay:
    """The ``ray.init`` context of the Ray that ``ray_cluster`` started in this process, or None."""

    context: Any = None


@pytest.fixture
def ray_cluster() -> Any:
    """A local Ray (2 CPUs, no dashboard) this process is connected to, shared with the tests right after this one
    that ask for it too (:func:`pytest_runtest_teardown` stops it before any other test); its address for a second
    process is ``ray_cluster.address_info["address"]``."""
    ray = pytest.importorskip("ray")
    if _SharedRay.context is None:
        _SharedRay.context = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace=RAY_NAMESPACE)
    return _SharedRay.context


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    yield
    if _SharedRay.context is not None and (
        nextitem is None or "ray_cluster" not in getattr(nextitem, "fixturenames", ())
    ):
        import ray

        ray.shutdown()
        _SharedRay.context = None


def _shares_ray(nodeid: str) -> bool:
    return nodeid.removeprefix("tests/").startswith(SHARED_RAY_TESTS)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """For ``-n N`` (xdist's "load"): "load" with the :data:`SHARED_RAY_TESTS` as one unit of work; every other test
    is a unit of its own, handed out in collection order (LONGEST_FIRST) to a worker down to two waiting; the largest
    unit, the Ray tests, goes first."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class RayTestsTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "shared-ray" if _shares_ray(nodeid) else nodeid

    return RayTestsTogether(config, log)


def _is_slow(item: pytest.Item) -> bool:
    if "slow" in item.keywords or "ray" in item.keywords:
        return True
    path, _, name = item.nodeid.partition("::")
    return f"{path.removeprefix('tests/')}::{name.split('[', 1)[0]}" in SLOW_TESTS


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    missing_on_ci: set[str] = set()
    for item in items:
        if ("ray_cluster" in getattr(item, "fixturenames", ())) != _shares_ray(item.nodeid):
            raise pytest.UsageError(
                f"{item.nodeid}: SHARED_RAY_TESTS (tests/conftest.py) must list exactly the tests that use ray_cluster"
            )
        if _is_slow(item) and "slow" not in item.keywords:
            item.add_marker(pytest.mark.slow)
        for marker, (available, how, required_on_ci) in _HOSTS.items():
            if marker not in item.keywords or available:
                continue
            if ON_CI and required_on_ci:
                missing_on_ci.add(f"{marker} ({how})")
            item.add_marker(pytest.mark.skip(reason=f"needs {marker}: {how}"))
    if missing_on_ci:
        raise pytest.UsageError(f"CI must provide these hosts: {', '.join(sorted(missing_on_ci))}")
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0].removeprefix("tests/"), len(rank)))
