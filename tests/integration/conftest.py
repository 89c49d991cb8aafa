"""Integration fixtures: one sandbox fleet per test session, torn down and checked for leftovers."""
from __future__ import annotations

import os

import pytest

from tests.integration.ansible import PlaybookRunner
from tests.integration.sglang_server import disarm_guards
from tests.sandbox.emulator_payload import build_emulator
from tests.sandbox.fleet import Fleet, FleetConfig, SandboxHost, machine_snapshot, unsupported_reason

SESSION_HOSTS = int(os.environ.get("LLMOPS_SANDBOX_HOSTS", "3"))
# The only way the integration tests may be skipped: said on the command line, and printed (scripts/integration.sh).
SKIP_ENV = "LLMOPS_SKIP_INTEGRATION"


# Seconds each module took alone (the whole suite on a 2-core machine, 2026-12-07, `--durations=0`): `make test`
# splits the modules that do not measure into lanes that take about as long (scripts/gates.sh, --lane). A module
# not listed counts as NEW_MODULE_SECONDS until it is.
MODULE_SECONDS = {
    "test_measurement_faults": 234, "test_guard": 224, "test_pipeline_interrupts": 148, "test_server_faults": 139,
    "test_moe_modules": 115, "test_server_deploy": 113, "test_upgrade": 83, "test_server_facts_journal": 57,
    "test_server_instances": 53, "test_bench_sweep": 51, "test_engine_fleet": 40, "test_secrets": 28,
    "test_sandbox_foundation": 25, "test_installed_package": 24, "test_server_hardening": 22,
    "test_upgrade_canary": 327, "test_pipeline": 214, "test_awx_templates": 173, "test_search_stage": 167,
    "test_api": 165, "test_fleet": 161, "test_rollout": 47, "test_emulator_under_systemd": 45,
}
NEW_MODULE_SECONDS = 60


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--lane", metavar="K/N", default=None,
                     help="only the modules of lane K of N: the modules split into N lanes of about equal time "
                          "(MODULE_SECONDS), each lane run by a pytest of its own with a sandbox fleet of its own")


def lanes(modules: list[str], count: int) -> list[list[str]]:
    """``modules`` split into ``count`` lanes of about equal time: the longest first, each to the lane with the least
    time so far (ties: the lower lane)."""
    chosen: list[list[str]] = [[] for _ in range(count)]
    seconds = [0] * count
    for module in sorted(modules, key=lambda m: (-MODULE_SECONDS.get(m, NEW_MODULE_SECONDS), m)):
        lane = seconds.index(min(seconds))
        chosen[lane].append(module)
        seconds[lane] += MODULE_SECONDS.get(module, NEW_MODULE_SECONDS)
    return chosen


@pytest.hookimpl(trylast=True)  # after -m has deselected what it does not match
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With --lane K/N, only lane K's modules (of those collected, after -m). Modules marked ``measuring`` (their
    assertions rest on measured throughput: verdicts, curves, the search's optimum) run after the others, each module
    still in one piece; `make test` runs them on their own, once the lanes and the gates have ended (scripts/gates.sh):
    a measurement that competes with other work for the machine's 2 cores can tip a verdict (a fleet verdict did, with
    the gates beside it)."""
    if config.getoption("--lane"):
        lane, count = (int(part) for part in config.getoption("--lane").split("/"))
        mine = set(lanes(sorted({_module(item) for item in items}), count)[lane - 1])
        config.hook.pytest_deselected(items=[item for item in items if _module(item) not in mine])
        items[:] = [item for item in items if _module(item) in mine]
    items.sort(key=lambda item: item.get_closest_marker("measuring") is not None)


def _module(item: pytest.Item) -> str:
    return item.module.__name__.rsplit(".", 1)[-1]


@pytest.fixture(scope="session")
def fleet() -> Fleet:
    """Where sandbox hosts cannot run, every integration test errors (a skip would let a run pass having run none
    of the tests behind docs/reliability.md), unless LLMOPS_SKIP_INTEGRATION=1 asks for the skip."""
    reason = unsupported_reason()
    if reason and os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"sandbox hosts unavailable: {reason} ({SKIP_ENV}=1)")
    if reason:
        pytest.fail(f"sandbox hosts unavailable: {reason}. The integration tests need root and namespaces; "
                    f"set {SKIP_ENV}=1 to skip them on purpose", pytrace=False)
    sandbox = Fleet(FleetConfig())
    if sandbox.hosts():  # a crashed earlier session: start clean
        sandbox.down()
    before = machine_snapshot()
    sandbox.up(SESSION_HOSTS, emulator=build_emulator())
    yield sandbox
    breaches = sandbox.isolation_breaches()
    sandbox.down()
    after = machine_snapshot()
    changes = after.changes_since(before)
    before.release()
    after.release()
    assert breaches == [], "a sandbox host wrote onto the real machine"
    assert sandbox.leftovers() == [], "the sandbox fleet left traces on this machine"
    assert changes == [], "the sandbox fleet changed the real machine"


@pytest.fixture(scope="session")
def runner(fleet: Fleet) -> PlaybookRunner:
    return PlaybookRunner(inventory=fleet.inventory_file)


@pytest.fixture(scope="session")
def gpu1(fleet: Fleet) -> SandboxHost:
    """The host the single-host tests deploy to."""
    return next(h for h in fleet.hosts() if h.name == "gpu1")


@pytest.fixture(autouse=True, scope="module")
def no_guard_outlives_its_test_module(fleet: Fleet):
    """A test that interrupts or fails a stage leaves its host's guard armed, as it must in production; here it
    would fire minutes later in another module's measurement (a restart that costs CPU on the shared cores)."""
    yield
    for host in fleet.hosts():
        disarm_guards(fleet, host)
