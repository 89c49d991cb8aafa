"""Integration fixtures: one sandbox fleet per test session, torn down and checked for leftovers."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.ansible import PlaybookRunner
from tests.sandbox.fleet import Fleet, FleetConfig, machine_snapshot, unsupported_reason

SESSION_HOSTS = int(os.environ.get("LLMOPS_SANDBOX_HOSTS", "3"))


def _emulator_build() -> Path | None:
    try:
        from tests.emulator.build import build, default_build_dir
    except ImportError:  # the emulator is optional for the foundation proof tests
        return None
    return build(default_build_dir())["root"]


@pytest.fixture(scope="session")
def fleet() -> Fleet:
    reason = unsupported_reason()
    if reason:
        pytest.skip(f"sandbox hosts unavailable: {reason}")
    sandbox = Fleet(FleetConfig())
    if sandbox.hosts():  # a crashed earlier session: start clean
        sandbox.down()
    before = machine_snapshot()
    sandbox.up(SESSION_HOSTS, emulator=_emulator_build())
    yield sandbox
    sandbox.down()
    assert sandbox.leftovers() == [], "the sandbox fleet left traces on this machine"
    assert machine_snapshot().changes_since(before) == [], "the sandbox fleet changed the real machine"


@pytest.fixture(scope="session")
def runner(fleet: Fleet) -> PlaybookRunner:
    return PlaybookRunner(inventory=fleet.inventory_file)
