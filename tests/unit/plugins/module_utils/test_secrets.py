# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Secrets are masked in everything server_facts returns, whatever their source."""
from __future__ import annotations

import json

from ansible_collections.llmops.sglang.plugins.module_utils.secrets import MASK, mask_secrets
from ansible_collections.llmops.sglang.plugins.module_utils.server_args import secret_arg_errors
from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log

KEY = "sk-facts-'4f\"2"
LOG = (f"[2026-12-01 09:00:00] server_args=ServerArgs(model_path='/srv/m', api_key={KEY!r}, "
       f"admin_api_key='adm-77', tp_size=4)\n[2026-12-01 09:00:05] The server is fired up and ready to roll!\n")


def facts_result(server_info: dict) -> dict:
    return {"facts": parse_startup_log(LOG), "server_info": server_info, "log_lines": 2,
            "mismatches": [{"fact": "x", "log": f"saw {KEY}", "server_info": None}]}


def test_secret_fields_are_masked_everywhere_whatever_the_source() -> None:
    # The key came from the service's key file (not a module parameter): no_log would not hide it.
    server_info = {"api_key": KEY, "admin_api_key": "adm-77", "tp_size": 4, "internal_states": [{"api_key": KEY}]}
    masked = mask_secrets(facts_result(server_info), [KEY])
    text = json.dumps(masked)
    assert KEY not in text and json.dumps(KEY)[1:-1] not in text and "adm-77" not in text
    assert masked["server_info"]["api_key"] == MASK and masked["server_info"]["admin_api_key"] == MASK
    assert masked["server_info"]["internal_states"][0]["api_key"] == MASK
    assert masked["facts"]["server_args"]["api_key"] == MASK
    assert masked["server_info"]["tp_size"] == 4 and masked["mismatches"][0]["log"] == f"saw {MASK}"


def test_a_key_only_server_info_knows_is_masked_where_the_log_repeats_it() -> None:
    masked = mask_secrets({"server_info": {"api_key": "sk-only-here"}, "note": "Bearer sk-only-here"})
    assert masked == {"server_info": {"api_key": MASK}, "note": f"Bearer {MASK}"}


def test_absent_secrets_stay_absent() -> None:
    assert mask_secrets({"server_info": {"api_key": None, "admin_api_key": ""}}, [None, ""]) == {
        "server_info": {"api_key": None, "admin_api_key": ""}}


def test_secrets_in_server_args_are_refused_with_the_option_to_use() -> None:
    errors = secret_arg_errors({"api_key": "k", "admin_api_key": "a", "tp_size": 4})
    assert len(errors) == 2 and all("`api_key` option" in e for e in errors)
    assert errors[0].startswith("server_args.api_key:") and "readable by every local user" in errors[0]
    assert secret_arg_errors({"api_key": None, "tp_size": 4}) == []
