"""Vetting: a result set from a reader's machine, checked before it is committed
(:func:`vet_set`), and the CUDA runner's guard (:func:`expect_device`)."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from tipsite import devices as devices_table
from tipsite import gpucheck
from tipsite.records import rules
from tipsite.records.check import RecordError, machine_class, record_problems
from tipsite.records.store import (
    committed_paths,
    content_digest,
    load_set,
    load_sets,
    paths_from_env,
    run_key,
    set_digest,
)
from tipsite.records.versions import history_versions, is_current, tip_version

OLDEST_DATE = "2024-01-01"
# What no honest text holds: control characters (a line break only in warnings' messages, torch's
# own text, and in figures' texts) and the characters that reorder how text is displayed. Everything else is text: the
# pages and charts show it escaped (tipsite/sphinxext), so "profile:" or "|grad|" is just text.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]")
_LINE_BREAK = re.compile(r"[\n\r\t]")
# A machine's name and its fields, as the OS and the driver report them.
_HOST_TEXT = re.compile(r"[\w .,()@+/:#*-]{1,200}")


def _strings(value: Any, where: str = ""):
    """Every string in a record (keys too), with where it sits."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k, f"{where}.{k} (key)")
            yield from _strings(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{where}[{i}]")


def text_problems(record: dict) -> list[str]:
    """Text no honest run writes: control characters anywhere, a line break outside the
    warnings' messages and the figures' texts (a chart's title has two lines), a host field that
    is not a machine's name."""
    for where, text in _strings(record):
        where = where.lstrip(".")
        if _CONTROL.search(text):
            return [f"{where}: {text[:60]!r} holds control characters"]
        multiline = (where.startswith("warnings[") and where.endswith(".message")) or where.startswith("figures[")
        if _LINE_BREAK.search(text) and not multiline:
            return [f"{where}: {text[:60]!r} breaks a line; this field is one line of text"]
    for device, info in record["hosts"].items():
        for k, v in info.items():
            for text in v if isinstance(v, list) else [v]:
                if isinstance(text, str) and not _HOST_TEXT.fullmatch(text):
                    return [f"hosts[{device!r}][{k!r}]: {text[:60]!r} is not what a machine reports "
                            "(letters, digits, spaces and . , ( ) @ + / : # * - only)"]
    return []


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
            where = f"{device} comparison {c['name']!r}"
            samples = c["base"] + c["cand"]
            low = 1e-4 if c["metric"] == "time" else 0.0  # a memory ratio may be 0 (nothing kept)
            if c["measure"] == "ratio" and not low <= c["median"] <= 1e4:
                problems.append(f"{where}: a ratio of {c['median']:g} is not plausible")
            if c["metric"] == "time" and not all(0 < x <= 3600 for x in samples):
                problems.append(f"{where}: times outside (0, 3600] seconds")
            limit = _UNIT_LIMITS.get(c["unit"])
            if limit is not None and not all(0 <= x <= limit for x in samples):
                problems.append(f"{where}: {c['unit']} outside [0, {limit:g}] (10 TB)")
            if isinstance(cores, int) and not 1 <= c["threads"] <= cores * 4:
                problems.append(f"{where}: {c['threads']} threads do not fit {cores} cores")
        key = decision.get("key")
        limit = _UNIT_LIMITS.get(key["unit"]) if key else None
        if key and key["unit"] == "x" and not 0 <= key["value"] <= 1e4:
            problems.append(f"{device} key figure: a ratio of {key['value']:g} is not plausible")
        elif limit is not None and not -limit <= key["value"] <= limit:
            problems.append(f"{device} key figure: {key['value']:g} {key['unit']} is not plausible")
    for m in record.get("measurements") or []:
        limit = _UNIT_LIMITS.get(m["unit"])
        if limit is not None and not -limit <= m["value"] <= limit:
            problems.append(f"measurement {m['variant']!r}: {m['value']:g} {m['unit']} is not plausible")
    return problems


# Units a memory is measured in, and the most any machine holds (10 TB) in each.
_UNIT_LIMITS = {"B": 1e13, "bytes": 1e13, "KiB": 1e13 / 2**10, "MiB": 1e13 / 2**20, "GiB": 1e13 / 2**30,
                "KB": 1e10, "MB": 1e7, "GB": 1e4}


def key_problems_vs_samples(decision: dict, device: str) -> list[str]:
    """A key figure that is a comparison's must be that comparison's median, interval, rounds
    and unit, which :func:`tipsite.tipkit.rederive` recomputed from the samples."""
    key = decision.get("key")
    found = {c["name"]: c for c in decision.get("comparisons") or []}
    if not key or key["name"] not in found:
        return []
    c = found[key["name"]]
    want = {"value": c["median"], "low": c["low"], "high": c["high"], "rounds": len(c["ratios"]),
            "unit": "x" if c["measure"] == "ratio" else c["unit"]}
    wrong = [k for k, v in want.items() if key.get(k) != v]
    return [f"{device} key figure {key['name']!r}: its {', '.join(wrong)} are not its comparison's"] if wrong else []


def evidence_problems(record: dict, device: str) -> list[str]:
    """A decision on an accelerator stands on that device's own evidence, as the CUDA runner's
    guard demands (:func:`expect_device`): the GPU's calibration, the GPU's busy time in every
    timing, and GPU activity where the profiler counted it."""
    if not (device in devices_table.DEVICES and devices_table.DEVICES[device].accelerator):
        return []
    decision = record["verdicts"][device]
    problems = []
    if "calibration" not in decision:
        problems.append(f"its {device} decision carries no calibration of the GPU")
    for c in decision.get("comparisons") or []:
        if c["metric"] == "time" and "device_time" not in c:
            problems.append(f"{device} comparison {c['name']!r}: a timing without the GPU's busy time "
                            "(measured on the host only)")
        if "kernels" in c and not all(c["kernels"][k] >= 1 for k in ("base", "cand")):
            problems.append(f"{device} comparison {c['name']!r}: the profiler saw no GPU activity")
    return problems


def source_problems(record: dict, tip, versions: dict[str, dict]) -> list[str]:
    """The record's version digests and ``source_sha256`` name one file of one version of the
    tip: today's (the tip or its download) or one in the git history (``versions``)."""
    from tipsite import tipsource

    current = tip_version(tip.path)
    files = {}
    if is_current(record, current):
        text = Path(tip.path).read_text(encoding="utf-8")
        for made in (text, tipsource.inline(text, tip.path)):
            files[hashlib.sha256(made.encode("utf-8")).hexdigest()] = current
    files.update({sha: v for sha, v in versions.items() if v["tip"] == tip.name})
    if not is_current(record, current) and not any(is_current(record, v) for v in files.values()):
        return [f"its source (code {record['code_sha256'][:12]}, helpers {record['helpers_sha256'][:12]}) "
                "matches no version of the tip in this repository's history"]
    found = files.get(record["source_sha256"])
    if found is None or not is_current(record, found):
        return [f"source_sha256 {record['source_sha256'][:12]} is no file of the version it names "
                f"(code {record['code_sha256'][:12]})"]
    return []


def vet_record(record: dict, tips: dict, versions: dict[str, dict], rules_manifest: dict | None = None) -> list[str]:
    """Why a record from another machine cannot join the committed sets ([] when it can).

    Nothing the repository can compute is taken from the record: its figures and outcomes are
    recomputed from its samples (:func:`record_problems`), its rule, cases, groups, thresholds
    and key come from its tip version's entry in the rule manifest (:mod:`tipsite.records.rules`),
    its source is a file of that version, a GPU decision carries the GPU's evidence."""
    name = record.get("tip") if isinstance(record, dict) else None
    problems = record_problems(record)
    if problems:
        return problems
    problems = text_problems(record)
    if problems:
        return problems
    tip = tips.get(name)
    if tip is None:
        return [f"no tip named {name!r} in this repository"]
    if record.get("upgraded_from") or any(d.get("legacy") for d in record["verdicts"].values()):
        return ["a converted or legacy record is not a contribution"]
    problems += source_problems(record, tip, versions)
    cpu = record["hosts"].get("cpu") or {}
    if not (isinstance(cpu.get("flags"), list) and isinstance(cpu.get("cores"), int)):
        problems.append("hosts['cpu'] needs the CPU's flags and cores (its machine class)")
    manifest = rules.load() if rules_manifest is None else rules_manifest
    for device in record["verdicts"]:
        if device not in tip.devices:
            problems.append(f"decides {device!r}, which the tip does not measure")
            continue
        if machine_class(record, device) == devices_table.UNKNOWN_CLASS:
            problems.append(f"hosts[{device!r}] lacks what makes its machine class "
                            "(a GPU's name and compute capability; a CPU's flags and cores)")
        problems += evidence_problems(record, device)
        problems += key_problems_vs_samples(record["verdicts"][device], device)
        problems += rules.shape_problems(record, device, manifest)
    from tipsite import tipmeta

    try:
        if tipmeta.parse_version(record["torch"]) < tipmeta.parse_version(tip.min_torch):
            problems.append(f"torch {record['torch']} is older than the tip's min_torch {tip.min_torch}")
    except ValueError as exc:
        problems.append(str(exc))
    return problems + _plausibility(record)


def vet_set(path: Path, versions: dict[str, dict] | None = None, *, rules_manifest: dict | None = None,
            committed: list[Path] | None = None, tips: dict | None = None) -> list[str]:
    """Why the result set at ``path`` cannot be committed ([] when it can), each reason naming
    the file and the record: it must load as every set does (size, types, figures re-derived from
    their samples), come from one machine and run with each tip once, not repeat a committed
    set or record (``committed``: default the committed sets), and each record must pass
    :func:`vet_record` (versions default to the git history, the rule manifest to
    conf/tip-rules.json, ``tips`` to the gallery's)."""
    from tipsite import tipmeta

    try:
        data = load_set(path)
    except RecordError as exc:
        return [str(exc)]
    if not data["records"]:
        return [f"{path}: holds no record"]
    machines = {json.dumps(r["hosts"], sort_keys=True) for r in data["records"]}
    if len({run_key(r) for r in data["records"]}) > 1 or len(machines) > 1:
        return [f"{path}: one set holds the records of one machine and run"]
    names = [r["tip"] for r in data["records"]]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        return [f"{path}: {', '.join(twice)}: a set holds one record of each tip, these have more"]
    problems = duplicate_problems(path, data, committed_paths() if committed is None else committed)
    tips = {t.name: t for t in tipmeta.read_all()} if tips is None else tips
    if versions is None:  # the history only for records of an older version of their tip
        older = {r["tip"] for r in data["records"]
                 if r["tip"] in tips and not is_current(r, tip_version(tips[r["tip"]].path))}
        versions = history_versions(tips=older) if older else {}
    manifest = rules.load() if rules_manifest is None else rules_manifest
    for i, record in enumerate(data["records"]):
        problems += [f"{path}: record {i} ({record['tip']}): {p}"
                     for p in vet_record(record, tips, versions, manifest)]
    return problems


def duplicate_problems(path: Path, data: dict, committed: list[Path]) -> list[str]:
    """A set is its content: one whose records a committed set already holds is refused."""
    mine = {content_digest(r): r["tip"] for r in data["records"]}
    problems = []
    for other in committed:
        if Path(other).resolve() == Path(path).resolve():
            continue
        try:
            theirs = load_set(other)
        except RecordError:
            continue
        if set_digest(theirs) == set_digest(data):
            return [f"{path}: the same set as the committed {Path(other).name}"]
        repeated = sorted(mine[d] for d in mine.keys() & {content_digest(r) for r in theirs["records"]})
        if repeated:
            problems.append(f"{path}: records of {', '.join(repeated)} repeat those in the committed "
                            f"{Path(other).name}")
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
            if accelerator and decision and not decision.get("legacy"):
                # a profiler that could not see the GPU: loud, never a silent "inconclusive"
                problems += gpucheck.blind_problems(record, device)
    if problems:
        print(f"error: expected {device} results:\n" + "\n".join(problems), file=sys.stderr)
        return 1
    print(f"{len(sets)} result set(s) decide {device} for every tip that measures it: "
          + ", ".join(s["hosts"][device]["name"] for s in sets))
    return 0
