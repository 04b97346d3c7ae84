"""What a tip's page shows of its records: each device's state (:func:`device_states`) and the
runs of "Measured on" (:func:`columns`)."""

from __future__ import annotations

from collections.abc import Iterable

from tipsite.records.check import NOT_MEASURED, machine_class
from tipsite.records.store import content_digest
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
    """Every record of the tip, each run once whatever its hosts are called: this build's first,
    then by machine class (:func:`tipsite.records.machine_class` of each device it decided),
    newest first within a class. Two records are one run only when their content is the same
    (:func:`tipsite.records.content_digest`): a set that reuses another's host names adds rows,
    it never replaces them."""
    seen = {content_digest(this)} if this is not None else set()
    found = []
    for result_set in sets:
        for record in result_set["records"]:
            if record["tip"] != tip_name or record is this:
                continue
            digest = content_digest(record)
            if digest not in seen:
                seen.add(digest)
                found.append(record)

    def machine(record: dict) -> tuple:
        return tuple(sorted(machine_class(record, d) for d in (record.get("verdicts") or {})))

    found.sort(key=lambda r: r["date"], reverse=True)
    found.sort(key=machine)  # stable: newest first within a class
    return ([this] if this is not None else []) + found
