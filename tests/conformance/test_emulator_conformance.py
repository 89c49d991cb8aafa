# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The emulator prints and accepts what the real release its profile names prints and accepts.

For every profile in tests/emulator/profiles (its ``sglang_version``): the emulator's option table is the
release's (the copy shipped with the emulator equals what the wheel's ``add_cli_args`` builds), its
``--help`` is the release's ``--help`` text, and every startup-log line the emulator writes that the
collection reads is one the release's own log calls can print (tests/conformance/real_logs.py).
"""
from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.server_args import parse_help_flags
from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log, strip_prefix
from tests.conformance.conftest import extracted
from tests.conformance.emulator_run import EMULATOR, emulator_help, emulator_startup_log
from tests.conformance.real_logs import placeholder_led_templates, templates
from tests.conformance.release_cli import emulator_table, real_cli
from tests.emulator.profiles import profile_release

PROFILES = sorted((EMULATOR / "profiles").glob("*.yaml"))
TABLES = sorted((EMULATOR / "sglang" / "sglang" / "_emulator" / "cli").glob("sglang-*.json"))
# A future release no wheel exists of yet (tests/emulator/build.py WHEEL_ONLY_RELEASES) is a real release's table
# less some options (`base`): the real tables are checked against their wheels, the future ones against their base.
RELEASE_TABLES = [table for table in TABLES if "base" not in json.loads(table.read_text(encoding="utf-8"))]
FUTURE_TABLES = [table for table in TABLES if table not in RELEASE_TABLES]
# Message starts the collection's parser reads (plugins/module_utils/startup_log.py) and the emulator prints.
READ_LINES = ("server_args=", "Load weight ", "KV Cache is allocated", "Memory pool end", "Capture ",
              "Disable piecewise", "Disable prefill", "max_total_num_tokens=", "The server is fired up",
              "Using MoE kernel config", "Using default MoE kernel config", "Config file not found at",
              "Down MoE config", "Attention backend not", "Init torch distributed", "Max running requests")


def profile_version(profile: Path) -> str:
    return profile_release(profile)


@pytest.mark.parametrize("table", RELEASE_TABLES, ids=lambda path: path.stem)
def test_shipped_cli_table_is_the_releases(table):
    version = table.stem.removeprefix("sglang-")
    assert json.loads(table.read_text(encoding="utf-8")) == emulator_table(version), (
        f"regenerate: python -m tests.conformance.release_cli {version}")


@pytest.mark.parametrize("table", FUTURE_TABLES, ids=lambda path: path.stem)
def test_a_future_release_removes_options_its_checked_base_has(table):
    future = json.loads(table.read_text(encoding="utf-8"))
    base = EMULATOR / "sglang" / "sglang" / "_emulator" / "cli" / f"sglang-{future['base']}.json"
    assert base in RELEASE_TABLES
    options = {flag for option in json.loads(base.read_text(encoding="utf-8"))["options"]
               for flag in option["option_strings"]}
    assert set(future["removed_options"]) <= options


@pytest.mark.parametrize("profile", PROFILES, ids=lambda path: path.stem)
def test_every_profile_names_a_release_the_emulator_has(profile):
    assert f"sglang-{profile_version(profile)}.json" in {table.name for table in TABLES}


def _without_stubbed_choices(help_text: str) -> str:
    """Choices the probe could not compute (a stubbed module) print as `{<stub ...>}`: compare the metavar."""
    return re.sub(r"\[\{<stub [^}]*\}( \.\.\.)?\]", lambda m: "[" + "X" + (m.group(1) or "") + "]",
                  re.sub(r"\[[A-Z_]+( \.\.\.)?\]", lambda m: "[X" + (m.group(1) or "") + "]", help_text))


@pytest.mark.parametrize("profile", PROFILES, ids=lambda path: path.stem)
def test_emulator_help_is_the_releases(profile, tmp_path):
    version = profile_version(profile)
    real, emulated = real_cli(version)["help"], emulator_help(profile, tmp_path)
    assert parse_help_flags(emulated) == parse_help_flags(real) or _stub_choices_only(emulated, real)
    assert _without_stubbed_choices(emulated) == _without_stubbed_choices(real)


def _stub_choices_only(emulated: str, real: str) -> bool:
    ours, theirs = parse_help_flags(emulated), parse_help_flags(real)
    differing = {name for name in set(ours) | set(theirs) if ours.get(name) != theirs.get(name)}
    return set(ours) == set(theirs) and all(
        any("<stub" in choice for choice in theirs[name]["choices"] or []) for name in differing)


@pytest.fixture(name="startup_logs", scope="module")
def startup_logs_fixture(tmp_path_factory):
    """One start per profile: the demo's baseline (TP4, NEXTN) and its fusion trial (prefill graphs off)."""
    logs = {}
    for profile in PROFILES:
        directory = tmp_path_factory.mktemp(profile.stem)
        logs[profile.stem] = [
            emulator_startup_log(profile, directory, ["--tp-size", "4", "--speculative-algorithm", "NEXTN"]),
            emulator_startup_log(profile, directory, ["--tp-size", "4", "--speculative-algorithm", "NEXTN",
                                                      "--enable-flashinfer-allreduce-fusion"]),
        ]
    return logs


@pytest.mark.parametrize("profile", PROFILES, ids=lambda path: path.stem)
def test_emulator_log_lines_are_the_releases(profile, startup_logs):
    version = profile_version(profile)
    src = extracted(version)
    checked, wrong = set(), []
    for text in startup_logs[profile.stem]:
        for line in text.replace("\r", "\n").splitlines():
            message = strip_prefix(line)[2]
            if not message.startswith(READ_LINES):
                continue
            first = re.match(r"[^ =]+=?", message).group()
            # the line's first word finds its log call, else one led by a placeholder ("{cache_name} is allocated")
            candidates = itertools.chain(templates(src, first), placeholder_led_templates(src))
            checked.add(first)
            if not any(template.regex().match(message) for template in candidates):
                wrong.append(message[:160])
    assert {"server_args=", "Load", "KV", "Capture", "max_total_num_tokens=", "Disable"} <= checked
    assert not wrong, f"lines sglang {version} cannot print: {sorted(set(wrong))}"


@pytest.mark.parametrize("profile", PROFILES, ids=lambda path: path.stem)
def test_emulator_dump_names_only_the_releases_fields(profile, startup_logs):
    version = profile_version(profile)
    real_fields = {field[0] for field in real_cli(version)["fields"]}
    for text in startup_logs[profile.stem]:
        facts = parse_startup_log(text)
        assert facts["ready"] and not facts.get("server_args_truncated")
        assert sorted(set(facts["server_args"]) - real_fields) == []
