"""What a tip's page shows of its records: each device's state (:func:`device_states`) and the
runs of "Measured on" (:func:`columns`)."""

from __future__ import annotations

from collections.abc import Iterable

from tipsite.records.check import NOT_MEASURED
from tipsite.records.store import run_key
from tipsite.records.versions import is_current


def device_states(tip_name: str, tip_devices: Iterable[str], version: dict[str, str],
                  this: dict | None, sets: Iterable[dict]) -> dict[str, dict]:
    """For each device the tip measures: its state on the page.

    ``{"state": "measured", "decision", "record", "origin"}`` from the newest record of the
    tip's current source (this build's run first), ``{"state": "stale", ...}`` when only an
    older version of the tip was measured there, ``{"state": "not measured"}`` otherwise.
    """
    candidates: list[tuple[dict, str]] = []
    if this is not None:
        candidates.append((this, "this build"))
    for result_set in sets:
        for record in result_set["records"]:
            if record["tip"] == tip_name and record is not this:
                candidates.append((record, result_set["path"]))
    states = {}
    for device in tip_devices:
        found = [(r, o) for r, o in candidates if device in (r.get("verdicts") or {})]
        current = [(r, o) for r, o in found if is_current(r, version)]
        pool, state = (current, "measured") if current else (found, "stale")
        if not pool:
            states[device] = {"state": NOT_MEASURED}
            continue
        # this build first, then the newest record
        record, origin = sorted(pool, key=lambda ro: (ro[1] == "this build", ro[0]["date"]))[-1]
        states[device] = {"state": state, "decision": record["verdicts"][device], "record": record,
                          "origin": origin}
    return states


def columns(tip_name: str, this: dict | None, sets: Iterable[dict]) -> list[dict]:
    """Every record of the tip, one per build configuration, this build's first, then newest first."""
    best: dict[tuple, dict] = {}
    for result_set in sets:
        for record in result_set["records"]:
            if record["tip"] == tip_name:
                key = run_key(record)
                if key not in best or record["date"] > best[key]["date"]:
                    best[key] = record
    out = [this] if this is not None else []
    if this is not None:
        best.pop(run_key(this), None)
    return out + sorted(best.values(), key=lambda r: r["date"], reverse=True)
