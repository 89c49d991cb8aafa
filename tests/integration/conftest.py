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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules marked ``measuring`` (their assertions rest on measured throughput: verdicts, curves, the search's
    optimum) run after the others, each module still in one piece. `make test` runs the gates beside the
    integration tests (scripts/gates.sh) for about their first 20 minutes, and a measurement that competes with
    them for the machine's 2 cores can tip a verdict; the others (deploys, faults, interrupts) take longer than
    that."""
    items.sort(key=lambda item: item.get_closest_marker("measuring") is not None)


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
