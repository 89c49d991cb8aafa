# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The upgrade canary's goodput under the run's SLO (docs/upgrade.md, "The canary"), one probe at a time through the
action llmops.sglang.canary_goodput.

When the run has an SLO (``tuning_run_search``), the canary asks of each release a part of what the search stage asks
of a candidate, with the same workload, SLO and rate options:

- of the serving release (phase ``old``): the highest open-loop request rate at which every run meets the SLO, by the
  search stage's rate search (rate_search.py: bracket, bisect, all ``repeats`` runs at the rate hold);
- of the new release (phase ``new``): whether every one of ``repeats`` runs meets the SLO at that rate less the
  policy's ``max_goodput_loss_pct``. An upgrade need not serve more, so the new release's capacity above that rate is
  not searched: one probe, on the server start its throughput sweep used.

Controller-side. The state is ``<measurement dir>/goodput.json`` (the probes' log, the planned probe, the result once
done) and each probe's sweep under ``probes/``, written after every probe so that a failed step leaves its evidence; a
first step (no sweep) starts over.
"""
from __future__ import annotations

import shutil
import statistics
import typing as t
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils.upgrade_verdict import validated_options
from ansible_collections.llmops.sglang.plugins.plugin_utils import rate_search
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import read_json, record_name, serialize, write_files
from ansible_collections.llmops.sglang.plugins.plugin_utils.search_stage import Inputs, open_loop_runs

PHASES = ("old", "new")
STATE, PROBES = record_name("goodput"), record_name("probes")


class Goodput:
    """One release's goodput step on the canary: ``step(sweep)`` records the probe just measured and plans the next.
    ``reference`` (phase ``new``) is the serving release's result."""

    def __init__(self, directory: str | Path, search: t.Any, phase: str, *, policy: dict | None = None,
                 reference: dict | None = None, check_mode: bool = False) -> None:
        if phase not in PHASES:
            raise ValueError(f"phase: one of {', '.join(PHASES)}, not {phase!r}")
        if phase == "new" and not isinstance(reference, dict):
            raise ValueError("reference: the serving release's goodput result (phase old's) is needed for phase new")
        self.dir, self.phase, self.reference, self.check_mode = Path(directory), phase, reference, check_mode
        self.inputs = Inputs(search)  # SearchInputError names each field
        self.max_loss_pct = float(validated_options(policy)["max_goodput_loss_pct"])
        self.written: list[str] = []

    def max_probes(self) -> int:
        """How many probes this phase may take (the playbook's loop length)."""
        return int(self.inputs.rate["max_probes"]) if self.phase == "old" else 1

    def step(self, sweep: dict | None) -> dict:
        """``{done: false, probe, bench}`` (the bench module's options of the next probe), or ``{done: true,
        result}`` once the phase is answered; ``sweep`` is the bench result of the probe planned before (None for
        the first step, which starts over)."""
        state = {"phase": self.phase, "slo": self.inputs.slo, "log": [], "planned": None, "result": None}
        if sweep is None:
            if not self.check_mode:
                shutil.rmtree(self.dir / PROBES, ignore_errors=True)  # an earlier attempt's
        else:
            state = read_json(self.dir / STATE) or state
            planned = state.get("planned") or {}
            state["log"] = rate_search.add_probe(state["log"], sweep["levels"][0]["request_rate"],
                                                 planned.get("phase", "probe"), open_loop_runs(sweep))
            self._write({f"{PROBES}/{len(state['log']):02d}.json": sweep})
        step = self._next(state["log"])
        state["planned"] = step
        if step is None:
            state["result"] = self._result(state["log"])
        self._write({STATE: state})
        if step is None:
            return {"done": True, "result": state["result"]}
        return {"done": False, "probe": step, "bench": self.inputs.bench(step["rate_rps"], step["repeats"])}

    def _rate_options(self) -> dict:
        return self.inputs.rate_options(float(self.inputs.rate["start_rps"]))

    def _check_rate(self) -> float | None:
        rate = (self.reference or {}).get("rate_rps")
        return None if rate is None else rate * (1.0 - self.max_loss_pct / 100.0)

    def _next(self, log: list[dict]) -> dict | None:
        if self.phase == "old":
            return rate_search.next_probe(log, max_probes=self.max_probes(), **self._rate_options())
        check = self._check_rate()
        if log or check is None:
            return None
        return {"rate_rps": check, "repeats": int(self.inputs.rate["repeats"]), "phase": "check"}

    def _result(self, log: list[dict]) -> dict:
        if self.phase == "old":
            return {"slo": self.inputs.slo, **rate_search.rate_result(log, **self._rate_options())}
        check = self._check_rate()
        holds = [held for entry in log for held in entry["holds"]]
        goodputs = [value for entry in log for value in entry["goodput_rps"] if value is not None]
        margins = [value for entry in log for value in entry["slo_margin"] if value is not None]
        record = {"slo": self.inputs.slo, "rate_rps": check, "max_loss_pct": self.max_loss_pct, "probes": log,
                  "held": None, "runs": len(holds), "failed_runs": holds.count(False),
                  "goodput_rps": statistics.median(goodputs) if goodputs else None,
                  "worst_margin": max(margins, default=None), "reason": None}
        if check is None:
            why = (self.reference or {}).get("reason") or "no rate was confirmed"
            return {**record, "reason": f"the serving release met the SLO at no rate its search tried ({why})"}
        if any(entry["client_limited"] for entry in log):
            # a run the client could not drive measured the client, not the server (rate_search.py)
            return {**record, "reason": f"the benchmark client could not drive {check:.3g} req/s"}
        return {**record, "held": bool(holds) and all(holds)}

    def _write(self, files: dict[str, t.Any]) -> None:
        texts = {name: serialize(content) for name, content in files.items()}
        self.written += [str(path) for path in write_files(self.dir, texts, check_mode=self.check_mode)]
