# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Checks of a tuning run's inputs (the variables of the tuning_run role and the inventory's candidate flag sets).

Note that this module util is private to the llmops.sglang collection; do not use it from other collections.

Every stage begins with these checks (action ``llmops.sglang.run_inputs``), on the controller, before anything
is deployed: a benchmark option, comparison option, decision policy or MoE setting that cannot work would
otherwise surface only after a candidate was deployed, where its error would be taken for the candidate's
failure. Each problem is one message that names the variable and the element, says what is expected and what was
given, e.g. ``tuning_run_bench.concurrency_levels[0]: must be a positive integer, got 0``.

Values are taken the way Ansible's module argument types take them (``"5"`` is an integer, ``"yes"`` a boolean,
``"1,4"`` a list), so an AWX survey or ``-e key=value`` is judged by what the modules would receive.
"""
from __future__ import annotations

import difflib
import math
import re
import typing as t

from ansible_collections.llmops.sglang.plugins.module_utils import restart_check as _restart_check
from ansible_collections.llmops.sglang.plugins.module_utils import stages as _stages
from ansible_collections.llmops.sglang.plugins.module_utils._bench_config import MAX_CONCURRENCY
from ansible_collections.llmops.sglang.plugins.module_utils.gpu_cost import Scales
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_unit import (
    environment_errors,
    server_arg_errors,
    service_name_error,
)
from ansible_collections.llmops.sglang.plugins.module_utils.sequential_verdict import (
    DESIGN_DEFAULTS,
    MAX_REPEATS_LIMIT,
    SPENDING_FUNCTIONS,
)

STAGES = _stages.ROUTINE
FORCEABLE_STAGES = _stages.FORCEABLE
BENCH_ENDPOINTS = ("completions", "chat", "generate")
BENCH_ENGINES = ("native", "sglang_bench_serving")
# Options of llmops.sglang.bench the pipeline sets itself (server address, key, files).
BENCH_PIPELINE_OWNED = {"base_url": "sglang_port", "host": "sglang_port", "port": "sglang_port",
                        "api_key": "sglang_api_key", "output_file": None, "progress_file": None}
COMPARE_METRICS = ("agg_tok_s", "per_req_tok_s", "steady_agg_tok_s")
VERDICTS = ("improved",)
MOE_ENGINES = ("llmops", "sglang")
MOE_SEARCH_SPACES = ("full", "prefiltered", "pruned")
# A trial's name is a directory of the run (flags/<host>/trials/<name>/); fullmatch: "$" would accept "t1\n".
TRIAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# A run id is the run's directory under the runs root (AWX shows it as a free-text survey field): one path component
# that cannot be "." or "..", hold a "/" or start with "-".
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
BOOL_TRUE = ("yes", "on", "1", "true", "y", "t")
BOOL_FALSE = ("no", "off", "0", "false", "n", "f")


class InputError(ValueError):
    """One input that cannot work; the message starts with the variable path."""


def _got(value: t.Any) -> str:
    return f"got {value!r}" if not isinstance(value, (dict, list)) else f"got a {type(value).__name__}"


def _did_you_mean(word: str, known: t.Iterable[str]) -> str:
    close = difflib.get_close_matches(str(word), list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def as_int(path: str, value: t.Any, *, minimum: int | None = None, what: str | None = None) -> int:
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        number = int(value)
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    description = what or ("an integer" if minimum is None else
                           "a positive integer" if minimum == 1 else f"an integer >= {minimum}")
    if number is None or (minimum is not None and number < minimum):
        raise InputError(f"{path}: must be {description}, {_got(value)}")
    return number


def as_number(path: str, value: t.Any, *, minimum: float | None = None, strict: bool = False,
              maximum: float | None = None) -> float:
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is not None and not math.isfinite(number):
        number = None
    low_ok = number is not None and (minimum is None or number > minimum or (not strict and number == minimum))
    high_ok = number is not None and (maximum is None or number <= maximum)
    if not (low_ok and high_ok):
        if minimum is not None and maximum is not None:
            bound = f"a number between {minimum:g} and {maximum:g}"
        elif minimum is not None:
            bound = f"a number {'>' if strict else '>='} {minimum:g}"
        else:
            bound = "a number"
        raise InputError(f"{path}: must be {bound}, {_got(value)}")
    return number


def as_bool(path: str, value: t.Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in BOOL_TRUE + BOOL_FALSE:
        return value.strip().lower() in BOOL_TRUE
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise InputError(f"{path}: must be true or false, {_got(value)}")


def as_choice(path: str, value: t.Any, choices: t.Sequence[str]) -> str:
    if isinstance(value, str) and value in choices:
        return value
    hint = _did_you_mean(value, choices) if isinstance(value, str) else ""
    raise InputError(f"{path}: must be one of {', '.join(choices)}, {_got(value)}{hint}")


def as_list(path: str, value: t.Any) -> list:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise InputError(f"{path}: must be a list (or a comma-separated string), {_got(value)}")


def as_mapping(path: str, value: t.Any) -> dict:
    if not isinstance(value, dict):
        raise InputError(f"{path}: must be a mapping, {_got(value)}")
    return value


class Checker:
    """Collects every problem instead of stopping at the first, so one run of a stage shows all of them."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def check(self, function: t.Callable[..., t.Any], *args: t.Any, **kwargs: t.Any) -> t.Any:
        try:
            return function(*args, **kwargs)
        except InputError as exc:
            self.errors.append(str(exc))
            return None

    def unknown_keys(self, path: str, mapping: dict, known: t.Iterable[str], extra: str = "") -> None:
        known = list(known)
        for key in mapping:
            if key not in known:
                self.errors.append(f"{path}.{key}: unknown key{_did_you_mean(key, known)} (known: "
                                   f"{', '.join(known)}){extra}")


def stage_names(checker: Checker, path: str, value: t.Any, allowed: t.Sequence[str]) -> list[str]:
    names = checker.check(as_list, path, value)
    if names is None:
        return []
    for index, name in enumerate(names):
        if not isinstance(name, str) or name not in allowed:
            hint = _did_you_mean(name, allowed) if isinstance(name, str) else ""
            checker.errors.append(f"{path}[{index}]: unknown stage {name!r}{hint}; stages are {', '.join(allowed)}")
    return names


def check_stages(checker: Checker, stages: t.Any, force: t.Any) -> None:
    names = stage_names(checker, "tuning_run_stages (-e stages)", stages, STAGES)
    if not names and not checker.errors:
        checker.errors.append(f"tuning_run_stages (-e stages): lists no stage; stages are {', '.join(STAGES)}")
    if isinstance(force, bool):
        return
    if isinstance(force, str) and force.strip().lower() in BOOL_TRUE + BOOL_FALSE:
        return
    stage_names(checker, "tuning_run_force (-e force)", force, FORCEABLE_STAGES)


def check_bench(checker: Checker, bench: t.Any) -> None:
    path = "tuning_run_bench"
    bench = checker.check(as_mapping, path, bench)
    if bench is None:
        return
    known = ("concurrency_levels", "repeats", "input_len", "output_len", "endpoint", "request_timeout_s",
             "level_timeout_s", "requests_per_level", "warmup_requests", "warmup_output_len", "max_failed_share",
             "steady_state", "seed",
             "engine", "model")
    for key in bench:
        if key in BENCH_PIPELINE_OWNED:
            owner = BENCH_PIPELINE_OWNED[key]
            checker.errors.append(f"{path}.{key}: set by the pipeline, not here"
                                  + (f" (it follows {owner})" if owner else ""))
    checker.unknown_keys(path, {k: v for k, v in bench.items() if k not in BENCH_PIPELINE_OWNED}, known)
    levels: list[int] = []
    if "concurrency_levels" in bench:
        raw = checker.check(as_list, f"{path}.concurrency_levels", bench["concurrency_levels"])
        if raw is not None and not raw:
            checker.errors.append(f"{path}.concurrency_levels: must list at least one concurrency, got []")
        for index, value in enumerate(raw or []):
            level = checker.check(as_int, f"{path}.concurrency_levels[{index}]", value, minimum=1)
            if level is not None and level > MAX_CONCURRENCY:
                checker.errors.append(f"{path}.concurrency_levels[{index}]: must be at most {MAX_CONCURRENCY} requests "
                                      f"in flight (one connection each), got {level}")
            elif level is not None:
                levels.append(level)
    for key in ("repeats", "input_len", "output_len", "warmup_output_len"):
        if key in bench:
            checker.check(as_int, f"{path}.{key}", bench[key], minimum=1)
    for key in ("request_timeout_s", "level_timeout_s"):  # null is no limit: a level could hold the GPUs for good
        if key in bench:
            checker.check(as_number, f"{path}.{key}", bench[key], minimum=0, strict=True)
    if bench.get("requests_per_level") is not None:
        requests = checker.check(as_int, f"{path}.requests_per_level", bench["requests_per_level"], minimum=1)
        if requests is not None and levels and max(levels) > requests:
            checker.errors.append(f"{path}.requests_per_level: {requests} cannot keep {max(levels)} requests in flight "
                                  "(the largest of concurrency_levels); raise it or leave it unset (max(2*C, 4))")
    if bench.get("warmup_requests") is not None:
        checker.check(as_int, f"{path}.warmup_requests", bench["warmup_requests"], minimum=0)
    if "max_failed_share" in bench:
        checker.check(as_number, f"{path}.max_failed_share", bench["max_failed_share"], minimum=0, maximum=1)
    if "steady_state" in bench:
        checker.check(as_bool, f"{path}.steady_state", bench["steady_state"])
    if "seed" in bench:
        checker.check(as_int, f"{path}.seed", bench["seed"])
    if "endpoint" in bench:
        checker.check(as_choice, f"{path}.endpoint", bench["endpoint"], BENCH_ENDPOINTS)
    if "engine" in bench:
        checker.check(as_choice, f"{path}.engine", bench["engine"], BENCH_ENGINES)
    if bench.get("model") is not None and (not isinstance(bench["model"], str) or not bench["model"].strip()):
        checker.errors.append(f"{path}.model: must be a model name (or null for the server's first), "
                              f"{_got(bench['model'])}")


def check_compare(checker: Checker, compare: t.Any) -> None:
    path = "tuning_run_compare"
    compare = checker.check(as_mapping, path, compare)
    if compare is None:
        return
    checker.unknown_keys(path, compare, ("metric", "min_effect_pct", "noise_band_pct", "alpha", "n_boot", "seed"))
    if "metric" in compare:
        checker.check(as_choice, f"{path}.metric", compare["metric"], COMPARE_METRICS)
    for key in ("min_effect_pct", "noise_band_pct"):
        if key in compare:
            checker.check(as_number, f"{path}.{key}", compare[key], minimum=0)
    if "alpha" in compare:
        alpha = checker.check(as_number, f"{path}.alpha", compare["alpha"], minimum=0, strict=True, maximum=1)
        if alpha == 1:
            checker.errors.append(f"{path}.alpha: must be below 1, got {compare['alpha']!r}")
    if "n_boot" in compare:
        checker.check(as_int, f"{path}.n_boot", compare["n_boot"], minimum=100,
                      what="an integer >= 100 (bootstrap resamples)")
    if "seed" in compare:
        checker.check(as_int, f"{path}.seed", compare["seed"])


def check_policy(checker: Checker, policy: t.Any) -> None:
    path = "tuning_run_policy"
    policy = checker.check(as_mapping, path, policy)
    if policy is None:
        return
    checker.unknown_keys(path, policy, ("require_verdict", "max_capacity_loss_pct", "allow_low_confidence"))
    if "require_verdict" in policy:
        checker.check(as_choice, f"{path}.require_verdict", policy["require_verdict"], VERDICTS)
    if policy.get("max_capacity_loss_pct") is not None:
        checker.check(as_number, f"{path}.max_capacity_loss_pct", policy["max_capacity_loss_pct"], minimum=0,
                      maximum=100)
    if "allow_low_confidence" in policy:
        checker.check(as_bool, f"{path}.allow_low_confidence", policy["allow_low_confidence"])


def check_moe(checker: Checker, moe: t.Any, inventory_hosts: t.Sequence[str] | None) -> None:
    path = "tuning_run_moe"
    moe = checker.check(as_mapping, path, moe)
    if moe is None:
        return
    checker.unknown_keys(path, moe, ("batch_sizes", "search_space", "work_dir", "timeout", "force", "tune_hosts",
                                     "seconds_per_config", "engine", "cache", "cache_dir"))
    if "engine" in moe and moe["engine"] not in MOE_ENGINES:
        checker.errors.append(f"{path}.engine: must be llmops (the collection's engine) or sglang (SGLang's tuner "
                              f"scripts), {_got(moe['engine'])}"
                              f"{_did_you_mean(moe['engine'], MOE_ENGINES) if isinstance(moe['engine'], str) else ''}")
    sizes = moe.get("batch_sizes")
    if sizes is not None and sizes != "auto":
        if isinstance(sizes, str) and not re.fullmatch(r"[\d,\s]+", sizes):
            checker.errors.append(f"{path}.batch_sizes: must be null (SGLang's defaults), auto or a list of positive "
                                  f"integers, {_got(sizes)}")
        else:
            raw = checker.check(as_list, f"{path}.batch_sizes", sizes)
            if raw is not None and not raw:
                checker.errors.append(f"{path}.batch_sizes: an empty list tunes nothing; use null for SGLang's "
                                      "defaults or auto")
            for index, value in enumerate(raw or []):
                checker.check(as_int, f"{path}.batch_sizes[{index}]", value, minimum=1)
    space = moe.get("search_space")
    if "search_space" in moe and space not in MOE_SEARCH_SPACES and not (
            isinstance(space, str) and space.startswith("/")):
        checker.errors.append(f"{path}.search_space: must be full, prefiltered, pruned or the absolute path of a "
                              f"JSON list of configs, {_got(space)}{_did_you_mean(space, MOE_SEARCH_SPACES) if isinstance(space, str) else ''}")
    if "work_dir" in moe and not (isinstance(moe["work_dir"], str) and moe["work_dir"].startswith("/")):
        checker.errors.append(f"{path}.work_dir: must be an absolute path on the host, {_got(moe['work_dir'])}")
    if "timeout" in moe:
        checker.check(as_number, f"{path}.timeout", moe["timeout"], minimum=0, strict=True)
    if "force" in moe:
        checker.check(as_bool, f"{path}.force", moe["force"])
    if "cache" in moe:
        checker.check(as_bool, f"{path}.cache", moe["cache"])
    if moe.get("cache_dir") is not None and not (isinstance(moe["cache_dir"], str) and moe["cache_dir"].strip()):
        checker.errors.append(f"{path}.cache_dir: must be a directory on the controller (null = "
                              f"<tuning_run_root>/cache/moe-engine), {_got(moe['cache_dir'])}")
    if moe.get("seconds_per_config") is not None:
        checker.check(as_number, f"{path}.seconds_per_config", moe["seconds_per_config"], minimum=0, strict=True)
    if moe.get("tune_hosts"):
        hosts = checker.check(as_list, f"{path}.tune_hosts", moe["tune_hosts"])
        for index, host in enumerate(hosts or []):
            if not isinstance(host, str) or (inventory_hosts is not None and host not in inventory_hosts):
                checker.errors.append(f"{path}.tune_hosts[{index}]: {host!r} is not a host of the inventory"
                                      f"{_did_you_mean(host, inventory_hosts or []) if isinstance(host, str) else ''}")
        if hosts and len(set(map(str, hosts))) != len(hosts):
            checker.errors.append(f"{path}.tune_hosts: lists a host twice: {hosts}")


def check_run_id(checker: Checker, run_id: t.Any) -> None:
    if isinstance(run_id, int) and not isinstance(run_id, bool):
        run_id = str(run_id)  # -e '{"run_id": 20261201}' names the same directory as "20261201"
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
        checker.errors.append("run_id (-e run_id, tuning_run_id): must be 1 to 128 letters, digits, '.', '_' or '-', "
                              f"starting with a letter or digit (it names the run's directory under the runs root), "
                              f"{_got(run_id)}")


def check_flag_sets(checker: Checker, flag_sets: t.Any) -> None:
    path = "sglang_candidate_flag_sets"
    sets = checker.check(as_list, path, flag_sets) if not isinstance(flag_sets, str) else None
    if isinstance(flag_sets, str):
        checker.errors.append(f"{path}: must be a list of {{name, args}}, {_got(flag_sets)}")
    seen: dict[str, int] = {}
    for index, entry in enumerate(sets or []):
        where = f"{path}[{index}]"
        if not isinstance(entry, dict):
            checker.errors.append(f"{where}: must be a mapping with name and args, {_got(entry)}")
            continue
        checker.unknown_keys(where, entry, ("name", "args", "force"))
        if "force" in entry:
            checker.check(as_bool, f"{where}.force", entry["force"])
        name = entry.get("name")
        if not isinstance(name, str) or not TRIAL_NAME.fullmatch(name):
            checker.errors.append(f"{where}.name: must be a name of letters, digits, '.', '_' or '-' (it names the "
                                  f"trial's directory), {_got(name)}")
        elif name in seen:
            checker.errors.append(f"{where}.name: {name!r} is also the name of {path}[{seen[name]}]; names must be "
                                  "unique (each names its trial's directory)")
        else:
            seen[name] = index
        args = entry.get("args")
        if not isinstance(args, dict) or not args:
            checker.errors.append(f"{where}.args: must be a non-empty mapping of SGLang server args "
                                  f"(e.g. {{enable_torch_compile: true}}), {_got(args)}")
            continue
        for flag in args:
            if not _is_arg_name(flag):
                checker.errors.append(f"{where}.args: {flag!r} is not a server arg name (like tp_size or "
                                      "enable_torch_compile, without the leading --)")
        checker.errors += _arg_value_errors(f"{where}.args", args)


def _is_arg_name(flag: t.Any) -> bool:
    return isinstance(flag, str) and re.fullmatch(r"[a-z][a-z0-9_-]*", flag) is not None


def _arg_value_errors(path: str, args: dict) -> list[str]:
    """Values that would leave their setting in the unit (the names are checked on their own)."""
    return server_arg_errors(path, {flag: value for flag, value in args.items() if _is_arg_name(flag)})


def check_baseline_args(checker: Checker, args: t.Any) -> None:
    path = "sglang_baseline_args"
    mapping = checker.check(as_mapping, path, args)
    for flag in mapping or {}:
        if not _is_arg_name(flag):
            checker.errors.append(f"{path}: {flag!r} is not a server arg name (like tp_size, without the leading --)")
    checker.errors += _arg_value_errors(path, mapping or {})


def check_environment(checker: Checker, environment: t.Any) -> None:
    """The service environment of the baseline (later stages read it back from the run: plugin_utils/adoption)."""
    mapping = checker.check(as_mapping, "sglang_environment", environment)
    checker.errors += environment_errors("sglang_environment", mapping or {})


def check_time_scale(checker: Checker, time_scale: t.Any) -> None:
    """{serving, tuning, startup}: wall seconds per real-GPU second of an emulated server, its tuner and its starts."""
    path = "tuning_run_emulator_time_scale"
    scales = checker.check(as_mapping, path, time_scale)
    if scales is None:
        return
    checker.unknown_keys(path, scales, Scales._fields)
    if scales.get("serving") is None:
        checker.errors.append(f"{path}.serving: must be a number > 0 (the emulator's time_scale), "
                              f"{_got(scales.get('serving'))}")
    for key in Scales._fields:
        if scales.get(key) is not None:
            checker.check(as_number, f"{path}.{key}", scales[key], minimum=0, strict=True)


def check_sequential(checker: Checker, sequential: t.Any, bench: t.Any) -> None:
    """The candidates' stopping rule; its reference (the baseline, then each adopted candidate) needs 2 runs a level."""
    path = "tuning_run_sequential"
    rule = checker.check(as_mapping, path, sequential)
    if rule is None:
        return
    checker.unknown_keys(path, rule, tuple(DESIGN_DEFAULTS), " (or null: fixed repeats for candidates too)")
    most = checker.check(as_int, f"{path}.max_repeats", rule.get("max_repeats", DESIGN_DEFAULTS["max_repeats"]),
                         minimum=1)
    if most is not None and most > MAX_REPEATS_LIMIT:
        checker.errors.append(f"{path}.max_repeats: must be at most {MAX_REPEATS_LIMIT}, got {most}")
    least = checker.check(as_int, f"{path}.min_repeats", rule.get("min_repeats", DESIGN_DEFAULTS["min_repeats"]),
                          minimum=2, what="an integer >= 2 (an adopted candidate is the next candidate's reference, "
                                          "which needs 2 runs per level)")
    if least is not None and most is not None and least > most:
        checker.errors.append(f"{path}.min_repeats: {least} is more than max_repeats {most}")
    for key in ("spending", "futility_spending"):
        if key in rule:
            checker.check(as_choice, f"{path}.{key}", rule[key], SPENDING_FUNCTIONS)
    if "beta" in rule:
        beta = checker.check(as_number, f"{path}.beta", rule["beta"], minimum=0, strict=True, maximum=0.5)
        if beta == 0.5:
            checker.errors.append(f"{path}.beta: must be below 0.5, got {rule['beta']!r}")
    for key in ("stop_on_regression", "one_sided_stops"):
        if key in rule:
            checker.check(as_bool, f"{path}.{key}", rule[key])
    if not isinstance(bench, dict) or "repeats" not in bench:
        return
    try:
        repeats = as_int("tuning_run_bench.repeats", bench["repeats"], minimum=1)
    except InputError:
        return  # check_bench names that problem
    if repeats < 2:
        checker.errors.append("tuning_run_bench.repeats: the baseline is the first reference of tuning_run_sequential "
                              "and needs at least 2 runs per level, got 1 (or set tuning_run_sequential: null)")


def check_restart_check(checker: Checker, options: t.Any) -> None:
    """The restart check of adoptions that the noise between server starts could explain."""
    path = "tuning_run_restart_check"
    check = checker.check(as_mapping, path, options)
    if check is None:
        return
    checker.unknown_keys(path, check, tuple(_restart_check.DEFAULTS), " (or null: no restart check)")
    if check.get("cv_pct") is not None:
        checker.check(as_number, f"{path}.cv_pct", check["cv_pct"], minimum=0, strict=True,
                      maximum=_restart_check.MAX_CV_PCT)
    if check.get("repeats") is not None:
        repeats = checker.check(as_int, f"{path}.repeats", check["repeats"], minimum=2)
        if repeats is not None and repeats > _restart_check.MAX_REPEATS:
            checker.errors.append(f"{path}.repeats: must be at most {_restart_check.MAX_REPEATS}, got {repeats}")


def check_service_name(checker: Checker, name: t.Any) -> None:
    """The service every stage deploys, guards and restarts (lookup llmops.sglang.service_name): a bad name would
    otherwise fail only at the deploy, or have the guard watch a unit that cannot exist."""
    error = service_name_error("sglang_service_name", name)
    if error:
        checker.errors.append(error)


def validate_run_inputs(inputs: dict) -> list[str]:
    """Every problem of the run's inputs, as messages naming the variable; empty when all can work.

    ``inputs`` has the keys ``run_id``, ``stages``, ``force``, ``bench``, ``compare``, ``sequential``, ``restart_check``,
    ``policy``, ``moe``, ``flag_sets``, ``baseline_args``, ``environment``, ``skip_ineffective``,
    ``emulator_time_scale``, ``inventory_hosts`` and ``service_name``; a key that is absent (or None for the optional
    ones) is not checked.
    """
    checker = Checker()
    if "run_id" in inputs:
        check_run_id(checker, inputs["run_id"])
    if "stages" in inputs or "force" in inputs:
        check_stages(checker, inputs.get("stages", list(STAGES)), inputs.get("force", []))
    if inputs.get("bench") is not None:
        check_bench(checker, inputs["bench"])
    if inputs.get("compare") is not None:
        check_compare(checker, inputs["compare"])
    if inputs.get("sequential") is not None:
        check_sequential(checker, inputs["sequential"], inputs.get("bench"))
    if inputs.get("restart_check") is not None:
        check_restart_check(checker, inputs["restart_check"])
    if inputs.get("policy") is not None:
        check_policy(checker, inputs["policy"])
    if inputs.get("moe") is not None:
        check_moe(checker, inputs["moe"], inputs.get("inventory_hosts"))
    if inputs.get("flag_sets") is not None:
        check_flag_sets(checker, inputs["flag_sets"])
    if inputs.get("baseline_args") is not None:
        check_baseline_args(checker, inputs["baseline_args"])
    if inputs.get("environment") is not None:
        check_environment(checker, inputs["environment"])
    if inputs.get("skip_ineffective") is not None:
        checker.check(as_bool, "tuning_run_skip_ineffective", inputs["skip_ineffective"])
    if inputs.get("emulator_time_scale") is not None:
        check_time_scale(checker, inputs["emulator_time_scale"])
    if "service_name" in inputs:
        check_service_name(checker, inputs["service_name"])
    return checker.errors
