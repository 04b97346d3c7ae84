"""Vetting: a result set from a reader's machine, checked before it is committed
(:func:`vet_set`), and the CUDA runner's guard (:func:`expect_device`)."""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from tipsite import devices as devices_table
from tipsite.records.check import RecordError, machine_class, record_problems
from tipsite.records.store import load_set, load_sets, paths_from_env, run_key
from tipsite.records.versions import history_versions, is_current, tip_version

# What only markup needs: an HTML tag, a reST role, link or directive, a backtick, a line break,
# a link scheme. Comparison signs ("> 0", "<= 1.1x") are text.
_MARKUP = re.compile(r"<\s*[a-z/!?]|`|[\n\r]|^\s*\.\.\s|:[a-z][\w-]*:`|\|\w+\||"
                     r"(https?|javascript|data|file):", re.I)
OLDEST_DATE = "2024-01-01"


def _strings(value: Any, where: str = ""):
    """Every string in a record, with where it sits (warning messages left out: torch's own text,
    shown escaped)."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for k, v in value.items():
            if where.endswith("warnings]") and k == "message":
                continue
            yield from _strings(k, f"{where}.{k} (key)")
            yield from _strings(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{where}[{i}]" if not where.endswith("warnings") else f"{where}]")


def _plausibility(record: dict) -> list[str]:
    problems = []
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    if not OLDEST_DATE <= record["date"] <= now:
        problems.append(f"date {record['date']} is not between {OLDEST_DATE} and now")
    cores = (record["hosts"].get("cpu") or {}).get("cores")
    if isinstance(cores, int) and not 1 <= record["build_threads"] <= max(cores, 1) * 4:
        problems.append(f"build_threads {record['build_threads']} does not fit {cores} cores")
    for device, decision in (record.get("verdicts") or {}).items():
        for c in decision.get("comparisons") or []:
            low = 1e-4 if c["metric"] == "time" else 0.0  # a memory ratio may be 0 (nothing kept)
            if c["measure"] == "ratio" and not low <= c["median"] <= 1e4:
                problems.append(f"{device} comparison {c['name']!r}: a ratio of {c['median']:g} is not plausible")
            if c["metric"] == "time" and not all(0 < x <= 3600 for x in c["base"] + c["cand"]):
                problems.append(f"{device} comparison {c['name']!r}: times outside (0, 3600] seconds")
            if c["unit"] in ("B", "bytes") and not all(0 <= x <= 1e13 for x in c["base"] + c["cand"]):
                problems.append(f"{device} comparison {c['name']!r}: byte counts outside [0, 10 TB]")
    return problems


def vet_record(record: dict, tips: dict, versions: dict[str, dict]) -> list[str]:
    """Why a record from another machine cannot join the committed sets ([] when it can)."""
    name = record.get("tip")
    problems = record_problems(record)
    if problems:
        return problems
    for where, text in _strings({k: v for k, v in record.items() if k not in ("warnings", "figures")}):
        if _MARKUP.search(text):
            return [f"{where.lstrip('.')}: {text[:60]!r} holds markup or a link; results are plain text"]
    tip = tips.get(name)
    if tip is None:
        return [f"no tip named {name!r} in this repository"]
    if record.get("upgraded_from") or any(d.get("legacy") for d in record["verdicts"].values()):
        problems.append("a converted or legacy record is not a contribution")
    known = [v for v in versions.values() if v["tip"] == name]
    if not is_current(record, tip_version(tip.path)) and not any(is_current(record, v) for v in known):
        problems.append(f"its source (code {record['code_sha256'][:12]}, helpers {record['helpers_sha256'][:12]}) "
                        "matches no version of the tip in this repository's history")
    cpu = record["hosts"].get("cpu") or {}
    if not (isinstance(cpu.get("flags"), list) and isinstance(cpu.get("cores"), int)):
        problems.append("hosts['cpu'] needs the CPU's flags and cores (its machine class)")
    for device in record["verdicts"]:
        if device not in tip.devices:
            problems.append(f"decides {device!r}, which the tip does not measure")
        if machine_class(record, device) == devices_table.UNKNOWN_CLASS:
            problems.append(f"hosts[{device!r}] lacks what makes its machine class "
                            "(a GPU's name and compute capability; a CPU's flags and cores)")
    from tipsite import tipmeta

    try:
        if tipmeta.parse_version(record["torch"]) < tipmeta.parse_version(tip.min_torch):
            problems.append(f"torch {record['torch']} is older than the tip's min_torch {tip.min_torch}")
    except ValueError as exc:
        problems.append(str(exc))
    return problems + _plausibility(record)


def vet_set(path: Path, versions: dict[str, dict] | None = None) -> list[str]:
    """Why the result set at ``path`` cannot be committed ([] when it can): it must load as every
    set does, come from one machine and run, and each record must pass :func:`vet_record` (the
    tip's source at some commit of this repository; versions default to the git history)."""
    from tipsite import tipmeta

    try:
        data = load_set(path)
    except RecordError as exc:
        return [str(exc)]
    machines = {json.dumps(r["hosts"], sort_keys=True) for r in data["records"]}
    if len({run_key(r) for r in data["records"]}) > 1 or len(machines) > 1 or not data["records"]:
        return [f"{path}: one set holds the records of one machine and run"]
    tips = {t.name: t for t in tipmeta.read_all()}
    if versions is None:  # the history only for records of an older version of their tip
        older = {r["tip"] for r in data["records"]
                 if r["tip"] in tips and not is_current(r, tip_version(tips[r["tip"]].path))}
        versions = history_versions(tips=older) if older else {}
    problems = []
    for record in data["records"]:
        problems += [f"{path}: {record['tip']}: {p}" for p in vet_record(record, tips, versions)]
    return problems


def expect_device(device: str, paths: list[str]) -> int:
    """The CUDA runner's guard: its sets decide ``device`` for every tip that measures it, and
    only for those; a CPU-only tip's record must say CPU, whatever machine ran it."""
    from tipsite import tipmeta

    sets = load_sets(paths_from_env(os.pathsep.join(paths)))
    tips = {t.name: t for t in tipmeta.read_all()}
    problems = []
    if not sets:
        problems.append("no result sets given")
    for s in sets:
        if device not in s["hosts"]:
            problems.append(f"{s['path']}: the machine has no {device} device")
        for record in s["records"]:
            tip = tips.get(record["tip"])
            decided = set(record.get("verdicts") or {})
            if tip is None:
                continue
            if device in decided and device not in tip.devices:
                problems.append(f"{record['tip']}: claims a {device} result but does not measure {device}")
            if device in tip.devices and device not in decided:
                problems.append(f"{record['tip']}: measures {device} but its record has no {device} decision")
            decision = (record.get("verdicts") or {}).get(device) or {}
            accelerator = device in devices_table.DEVICES and devices_table.DEVICES[device].accelerator
            if accelerator and decision and not decision.get("legacy") and "calibration" not in decision:
                problems.append(f"{record['tip']}: its {device} decision carries no calibration of the GPU")
    if problems:
        print(f"error: expected {device} results:\n" + "\n".join(problems), file=sys.stderr)
        return 1
    print(f"{len(sets)} result set(s) decide {device} for every tip that measures it: "
          + ", ".join(s["hosts"][device]["name"] for s in sets))
    return 0
