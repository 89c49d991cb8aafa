# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The bookkeeping of a rollout's batches (playbooks/rollout_batches.yml, docs/reliability.md "Rollouts"): what a
host's record says once it is deployed and judged, and, from every host's record, what the batch decides - which of
its hosts failed, which hosts the undo puts back, the rollout's summary and why it stopped.

A host's record (the play's ``rollout_record`` fact): ``status`` (skipped, deploying, deployed, failed), ``batch`` (1
is the canary batch), ``revision`` (what the host ran before its change; none until it was recorded), the deploy's
``changed``, ``args``, ``moe_configs``, ``invocation_id`` and ``analysis``, a failure's ``reason``, and ``undone`` (what
the undo did) once it was put back. A host the rollout has not reached has no record (none or empty here).

Pure: records in, decisions out. Private to the llmops.sglang collection.
"""
from __future__ import annotations

NOT_REACHED = {"status": "not reached"}


def host_record(verdict: dict | None, *, batch: int, revision: str | None, changed: bool, args: dict,
                moe_configs: list, invocation_id: str | None) -> dict:
    """The record of a host its batch deployed: failed when the analysis (``verdict``, none when it was not judged:
    analysis off, or the deploy changed nothing) did not pass, with the analysis' reasons."""
    failed = verdict is not None and verdict.get("passed") is False
    return {"status": "failed" if failed else "deployed", "batch": batch, "revision": revision, "changed": changed,
            "args": args, "moe_configs": moe_configs, "invocation_id": invocation_id, "analysis": verdict,
            "reason": "analysis: " + "; ".join(verdict.get("reasons") or []) if failed else None}


def batch_outcome(records: dict, batch: list[str], number: int) -> dict:
    """What batch ``number`` (its hosts ``batch``, in play order) decides, from the records of every host of the play
    (``records``: host -> record, none or empty when not reached):

    - ``failed``: the hosts of this batch that failed (deploy or analysis);
    - ``updated``: every host the rollout changed so far, this batch's and the earlier ones' (a revision recorded
      before its change): what the undo puts back when a host of the batch failed;
    - ``deployed``: whether a host of this batch was deployed (a soak follows only then);
    - ``recorded``: the hosts whose rollout.json this batch writes (its own and those undone);
    - ``summary``: the rollout so far, as summary.json has it (canary, batch_size, stopped_at, undone, hosts);
    - ``message``: why the rollout stopped, and what was undone (empty when nothing failed)."""
    failed = [host for host in batch if _status(records, host) == "failed"]
    undone = [host for host, record in records.items() if record and "undone" in record]
    summary = {"canary": [host for host, record in records.items() if record and str(record.get("batch")) == "1"],
               "batch_size": len(batch), "stopped_at": failed[0] if failed else None, "undone": undone,
               "hosts": {host: record or dict(NOT_REACHED) for host, record in records.items()}}
    return {"failed": failed, "deployed": any(_status(records, host) == "deployed" for host in batch),
            "updated": [host for host, record in records.items() if record and record.get("revision") is not None],
            "recorded": list(dict.fromkeys(batch + undone)), "summary": summary,
            "message": _stop_message(records, failed, undone, number) if failed else ""}


def _status(records: dict, host: str) -> str | None:
    return (records.get(host) or {}).get("status")


def _stop_message(records: dict, failed: list[str], undone: list[str], number: int) -> str:
    reasons = "; ".join(str(records[host].get("reason")) for host in failed)
    puts = "; ".join(f"{host} {records[host]['undone']}" for host in undone)
    return (f"rollout stopped in batch {number} at {', '.join(failed)}: {reasons}. Every host it updated is put back "
            f"on the revision recorded before its change: {puts}. Hosts after it were not touched")
