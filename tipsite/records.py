"""Result records and result sets: the one owner of what a build measured.

A **record** is what one run of one tip left: the tip's ``RESULT`` (its rule, one *decision* per
device it measured, extra measurements, skipped parts) plus the provenance of the run: the tip
file's SHA-256, torch and Python versions, the build's thread setting, the date, and a
description of each device of the machine (``hosts``): the CPU's model, its relevant
instruction-set flags and core count; the GPU's name, CUDA version and driver. Each decision names
its device and the thread counts it measured with, so a CPU-only tip built on a GPU machine is a
CPU result of that machine's CPU, labelled so.

The build writes one record per executed tip beside its page (``<tip>.result.json``,
:func:`write_record`); :func:`export` gathers a build's records into a **result set**
(``build/results/<label>.json``); the site shows, for every tip and device, the decision of the
newest record whose tip source is the current one (:func:`device_states`), from this build,
from the committed sets in ``docs/_data/results/``, or from the sets named by ``TIPS_RESULT_SETS``.

Result sets come from other machines. Everything in them is checked here (types, finite
numbers, verdicts re-derived from their evidence) and treated as text, never as markup, by the
pages.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import hashlib
import json
import math
import os
import platform
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from conf import settings
from tipsite import devices as devices_table
from tipsite import tipkit

RECORD_SCHEMA = "tips-record/3"
SET_SCHEMA = "tips-result-set/3"
OLD_SET_SCHEMA = "tips-result-set/1"
# Schema 2 knew a tip's version only as the SHA-256 of its whole file (a prose edit or a change to
# how results are printed made every record of it an older version's); schema 3 adds the digests of
# tipsite/tipsource.py. `python -m tipsite.records upgrade-v2` adds them from the git history.
V2_SET_SCHEMA, V2_RECORD_SCHEMA = "tips-result-set/2", "tips-record/2"
RECORD_SUFFIX = ".result.json"
ENV_VAR = "TIPS_RESULT_SETS"
# Result sets committed with the sources (e.g. a GPU runner's), shown by every build.
DATA_DIR = settings.DOCS_DIR / "_data" / "results"
RESULT_KEYS = {"rule", "verdicts", "measurements", "skipped"}
MEASUREMENT_KEYS = {"variant", "metric", "value", "unit", "device"}
DECISION_KEYS = {"device", "verdict", "cases", "facts", "groups", "comparisons", "state", "key", "threads"}
COMPARISON_KEYS = {"name", "device", "threads", "x", "metric", "unit", "measure", "baseline",
                   "candidate", "base", "cand", "ratios", "median", "low", "high", "threshold",
                   "outcome"}
PROVENANCE_KEYS = {"schema", "tip", "topic", "source_sha256", "code_sha256", "helpers_sha256",
                   "torch", "python", "date", "build_threads", "hosts"}
VERSION_KEYS = ("code_sha256", "helpers_sha256")
NOT_MEASURED = "not measured"


class RecordError(ValueError):
    """A record or result set cannot be used; the message names the file and what is wrong."""


def device_word(device: str) -> str:
    """``CUDA`` for ``cuda``: the word readers see (:mod:`tipsite.devices`)."""
    return devices_table.word(device)


def verdicts() -> list[str]:
    from tipsite import tipmeta

    return list(tipmeta.vocab()["verdicts"])


def devices() -> list[str]:
    from tipsite import tipmeta

    return list(tipmeta.vocab()["devices"])


# --- checking: a tip's RESULT, a decision, a record ------------------------------------------------

def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _text(x: Any, max_len: int = 2000) -> bool:
    return isinstance(x, str) and len(x) <= max_len


def comparison_problems(c: Any, device: str) -> list[str]:
    if not isinstance(c, dict):
        return [f"a comparison must be a dict, got {type(c).__name__}"]
    missing = COMPARISON_KEYS - c.keys()
    if missing:
        return [f"a comparison misses {sorted(missing)}"]
    name = c["name"]
    where = f"comparison {name!r}"
    problems = []
    if not _text(name, 200) or not name.strip():
        problems.append("a comparison's name must be a short non-empty string")
    for k in ("baseline", "candidate", "metric", "unit"):
        if not _text(c[k], 200):
            problems.append(f"{where}: {k} must be a short string")
    if c["device"] != device:
        problems.append(f"{where} was measured on {c['device']!r}, not {device!r}")
    if c["measure"] not in ("ratio", "difference"):
        problems.append(f"{where}: measure must be 'ratio' or 'difference'")
    if not isinstance(c["threads"], int) or isinstance(c["threads"], bool) or c["threads"] < 1:
        problems.append(f"{where}: threads must be a positive integer")
    for k in ("median", "low", "high", "threshold"):
        if not _finite(c[k]):
            problems.append(f"{where}: {k} must be a finite number, got {c[k]!r}")
    if c["x"] is not None and not _finite(c["x"]):
        problems.append(f"{where}: x must be a finite number or None")
    lists = [c[k] for k in ("base", "cand", "ratios")]
    if not all(isinstance(v, list) and v and all(_finite(x) for x in v) for v in lists):
        problems.append(f"{where}: base, cand and ratios must be non-empty lists of finite numbers")
    elif len({len(v) for v in lists}) != 1:
        problems.append(f"{where}: base, cand and ratios differ in length")
    elif c["measure"] == "ratio" and any(v == 0 for v in c["cand"]):
        problems.append(f"{where}: a ratio with a candidate sample of 0")
    return problems + _timing_problems(c, where)


def _pair_ok(value: Any) -> bool:
    return (isinstance(value, dict) and set(value) == {"base", "cand"}
            and all(_finite(v) and v >= 0 for v in value.values()))


def _timing_problems(c: dict, where: str) -> list[str]:
    """The optional parts of a timing: its margin, and on a GPU its busy time and bound."""
    problems = []
    if c.get("margin", "clear") not in ("clear", "thin"):
        problems.append(f"{where}: margin must be 'clear' or 'thin'")
    timed = [k for k in ("device_time", "window", "bound") if k in c]
    if timed and len(timed) != 3:
        problems.append(f"{where}: device_time, window and bound come together")
    elif timed:
        if not (_pair_ok(c["device_time"]) and _pair_ok(c["window"])):
            problems.append(f"{where}: device_time and window need base and cand, finite and >= 0")
        elif any(c["window"][k] <= 0 for k in ("base", "cand")):
            problems.append(f"{where}: a window of 0 seconds")
        if c["bound"] not in ("device", "host"):
            problems.append(f"{where}: bound must be 'device' or 'host'")
    if "work" in c:
        work = c["work"]
        amounts = [k for k in ("flops", "bytes") if k in (work if isinstance(work, dict) else {})]
        if (not isinstance(work, dict) or len(amounts) != 1 or not _finite(work[amounts[0]])
                or work[amounts[0]] <= 0 or not _text(work.get("limit", ""), 60)
                or set(work) - {"flops", "bytes", "limit"}):
            problems.append(f"{where}: work is {{'flops' or 'bytes': a positive number, 'limit': name}}")
    return problems


def calibration_problems(calibration: Any) -> list[str]:
    """A GPU's calibration (tipkit.calibrate): names to positive finite rates and times."""
    if not isinstance(calibration, dict) or not all(
            _text(k, 60) and re.fullmatch(r"[a-z0-9_]+", k) and _finite(v) and v > 0
            for k, v in calibration.items()):
        return ["calibration must map plain names to positive finite numbers"]
    return []


def _fact_ok(value: Any) -> bool:
    return value is None or isinstance(value, bool) or _finite(value) or _text(value, 300)


def decision_problems(decision: Any, device: str) -> list[str]:
    """Problems with one device's decision; it must re-derive to its own verdict."""
    if not isinstance(decision, dict):
        return [f"must be a dict made by decide(), got {type(decision).__name__}"]
    missing = DECISION_KEYS - decision.keys()
    if missing:
        return [f"misses {sorted(missing)} (make it with decide())"]
    problems = []
    if decision["device"] != device:
        problems.append(f"was decided on {decision['device']!r}, not {device!r}")
    if decision["verdict"] not in verdicts():
        problems.append(f"verdict {decision['verdict']!r} is not one of {verdicts()}")
    facts, comparisons = decision["facts"], decision["comparisons"]
    if not isinstance(facts, dict) or not all(_text(k, 200) and _fact_ok(v) for k, v in facts.items()):
        problems.append("facts must map short names to a bool, number, string or None")
    if not isinstance(comparisons, list):
        problems.append("comparisons must be a list")
        comparisons = []
    for c in comparisons:
        problems += comparison_problems(c, device)
    if not isinstance(decision["groups"], dict) or not all(
            isinstance(v, list) and all(isinstance(m, str) for m in v) for v in decision["groups"].values()):
        problems.append("groups must map a name to a list of comparison names")
    if not comparisons and not facts:
        problems.append("decides without any measurement of this device (no comparison, no fact)")
    cases = decision["cases"]
    if (not isinstance(cases, list) or not cases or not all(
            isinstance(c, list) and len(c) == 2 and c[0] in verdicts() and isinstance(c[1], dict)
            for c in cases)):
        problems.append("cases must be a non-empty list of [verdict, {name: value}]")
    if not (isinstance(decision["threads"], list) and decision["threads"]
            and all(isinstance(t, int) and t > 0 for t in decision["threads"])):
        problems.append("threads must be a non-empty list of thread counts")
    problems += key_problems(decision["key"])
    about = decision.get("about")
    if not (about in (None, "device", "host") or (
            isinstance(about, dict) and all(_text(k, 200) and v in ("device", "host") for k, v in about.items()))):
        problems.append("about must be 'device', 'host', null, or a group's name to either")
    if decision.get("why") is not None and not _text(decision["why"], 500):
        problems.append("why must be a short text or null")
    if decision["verdict"] == "inconclusive" and not decision.get("why"):
        problems.append("an inconclusive verdict says why")
    if "calibration" in decision:
        problems += calibration_problems(decision["calibration"])
    elif any("device_time" in c for c in decision["comparisons"] if isinstance(c, dict)):
        problems.append("GPU timings without the GPU's calibration (tipkit.calibrate)")
    if problems:
        return problems
    _, rederived = tipkit.rederive(decision)
    return rederived


def key_problems(key: Any) -> list[str]:
    if key is None:
        return []
    if not isinstance(key, dict) or not {"name", "value", "unit"} <= key.keys():
        return ["key must be None or a dict with name, value, unit (low, high, rounds optional)"]
    problems = []
    if not _text(key["name"], 200) or not _text(key["unit"], 40):
        problems.append("key name and unit must be short strings")
    for k in ("value", "low", "high"):
        if k in key and key[k] is not None and not _finite(key[k]):
            problems.append(f"key {k} must be a finite number, got {key[k]!r}")
    if "value" in key and key["value"] is None:
        problems.append("key value must be a finite number")
    return problems


def result_problems(result: Any) -> list[str]:
    """Problems with a tip's ``RESULT``; an empty list means it is valid (see the README)."""
    if not isinstance(result, dict):
        return [f"RESULT must be a dict, got {type(result).__name__}"]
    try:
        result = json.loads(json.dumps(result, allow_nan=False))  # as it will be recorded
    except (TypeError, ValueError) as exc:
        return [f"RESULT must be plain data (numbers finite, no objects): {exc}"]
    problems = []
    missing = RESULT_KEYS - result.keys()
    if missing:
        problems.append(f"RESULT misses {sorted(missing)}")
    extra = result.keys() - RESULT_KEYS
    if extra:
        problems.append(f"RESULT has unknown keys {sorted(extra)}")
    if "verdict" in extra:
        problems.append("RESULT['verdict']: a tip decides one verdict per device, in RESULT['verdicts']")
    rule = result.get("rule")
    if not _text(rule, 1000) or not rule.strip():
        problems.append("RESULT['rule'] must state the rule the verdicts were decided by")
    decided = result.get("verdicts", {})
    if not isinstance(decided, dict):
        problems.append("RESULT['verdicts'] must map a device to its decision")
        decided = {}
    for device, decision in decided.items():
        if device not in devices():
            problems.append(f"RESULT['verdicts'][{device!r}]: unknown device (known: {devices()})")
            continue
        problems += [f"RESULT['verdicts'][{device!r}] {p}" for p in decision_problems(decision, device)]
    measurements = result.get("measurements", [])
    if not isinstance(measurements, list):
        problems.append("RESULT['measurements'] must be a list")
        measurements = []
    for i, m in enumerate(measurements):
        if not isinstance(m, dict) or not MEASUREMENT_KEYS <= m.keys():
            problems.append(f"RESULT['measurements'][{i}] needs {sorted(MEASUREMENT_KEYS)}")
            continue
        if not _finite(m["value"]) or ("spread" in m and m["spread"] is not None and not _finite(m["spread"])):
            problems.append(f"RESULT['measurements'][{i}]: value and spread must be finite numbers")
        if m["device"] not in devices():
            problems.append(f"RESULT['measurements'][{i}]: unknown device {m['device']!r}")
        if not all(_text(m[k], 200) for k in ("variant", "metric", "unit")):
            problems.append(f"RESULT['measurements'][{i}]: variant, metric and unit must be short strings")
    skipped = result.get("skipped", [])
    if not isinstance(skipped, list) or not all(_text(s, 500) for s in skipped):
        problems.append("RESULT['skipped'] must be a list of strings (why each part was skipped)")
    return problems


def required_devices(tip_devices: Iterable[str], machine: Iterable[str]) -> set[str]:
    """The devices a run on a machine with the devices ``machine`` must decide
    (:func:`tipsite.devices.required`)."""
    return devices_table.required(tip_devices, machine)


def coverage_problems(result: dict, tip_devices: Iterable[str], machine: Iterable[str]) -> list[str]:
    """A run decides every device it must (:func:`required_devices`) and no other."""
    tip_devices, machine = list(tip_devices), set(machine)
    decided = set(result.get("verdicts") or {})
    problems = [f"RESULT['verdicts'] decides {d!r}, which sphinx_gallery_tips_devices does not list"
                for d in sorted(decided - set(tip_devices))]
    need = required_devices(tip_devices, machine)
    where = "a machine with " + ", ".join(device_word(d) for d in sorted(machine))
    problems += [f"RESULT['verdicts'] has no decision for {d!r}, which this run on {where} must measure"
                 for d in sorted(need - decided)]
    return problems


# --- provenance ------------------------------------------------------------------------------

def source_sha256(path: Path | str) -> str:
    """The SHA-256 of the file that ran (provenance; :func:`tip_version` decides currency)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def tip_version(path: Path | str) -> dict[str, str]:
    """Which version of a tip the file at ``path`` is: the digests of its own code and of the
    helpers that measure and decide (:mod:`tipsite.tipsource`). A tip, its download and an
    older copy carrying the helpers give the same version when their code is the same."""
    from tipsite import tipsource

    return tipsource.file_version(path)


def is_current(record: dict, version: dict[str, str]) -> bool:
    """Whether ``record`` measured this version of the tip (prose and printing may differ)."""
    return all(record.get(k) == version[k] for k in VERSION_KEYS)


def build_date() -> str:
    """UTC date of the build; SOURCE_DATE_EPOCH wins for reproducible builds."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    now = (_dt.datetime.fromtimestamp(int(epoch), _dt.UTC) if epoch
           else _dt.datetime.now(_dt.UTC))
    return now.strftime("%Y-%m-%d %H:%M UTC")


def make_record(tip_path: Path | str, result: dict, *, build_threads: int) -> dict:
    """A record of this run of the tip at ``tip_path``: its RESULT plus provenance."""
    import torch

    tip_path = Path(tip_path)
    return {
        "schema": RECORD_SCHEMA,
        "tip": tip_path.stem,
        "topic": tip_path.parent.name,
        "source_sha256": source_sha256(tip_path),
        **tip_version(tip_path),
        **json.loads(json.dumps(result, allow_nan=False)),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "build_threads": build_threads,
        "date": build_date(),
        "hosts": devices_table.hosts(),
    }


def _host_problems(hosts_: Any) -> list[str]:
    if not isinstance(hosts_, dict) or "cpu" not in hosts_:
        return ["hosts must describe at least the CPU"]
    problems = []
    for device, info in hosts_.items():
        if device not in devices() or not isinstance(info, dict) or not _text(info.get("name"), 200):
            problems.append(f"hosts[{device!r}] must be a known device with a name")
            continue
        for k, v in info.items():
            ok = (v is None or _finite(v) or _text(v, 200)
                  or (isinstance(v, list) and all(_text(x, 40) for x in v)))
            if not ok:
                problems.append(f"hosts[{device!r}][{k!r}] must be text, a number or a list of flags")
    return problems


WARNING_ORIGINS = ("tip", "torch-internal", "other")


def warnings_problems(entries: Any) -> list[str]:
    """The record's ``warnings``: what the run raised (tipsite/tiprunner.py), as plain text."""
    if not isinstance(entries, list):
        return ["warnings must be a list"]
    for w in entries:
        if (not isinstance(w, dict) or not all(_text(w.get(k), 600) for k in ("category", "message", "where"))
                or w.get("origin") not in WARNING_ORIGINS or not isinstance(w.get("deprecation"), bool)
                or not isinstance(w.get("count"), int) or isinstance(w.get("count"), bool) or w["count"] < 1):
            return ["each warning needs text category, message and where, an origin "
                    f"({', '.join(WARNING_ORIGINS)}), deprecation true or false and a count"]
    return []


def record_problems(record: Any) -> list[str]:
    """Problems with a record (the tip's RESULT plus provenance); empty when it is valid."""
    if not isinstance(record, dict):
        return [f"a record must be a dict, got {type(record).__name__}"]
    if record.get("schema") != RECORD_SCHEMA:
        return [f"schema is {record.get('schema')!r}, not {RECORD_SCHEMA!r}"]
    problems = [f"record misses {k!r}" for k in sorted(PROVENANCE_KEYS - record.keys())]
    if problems:
        return problems
    if not re.fullmatch(r"tip_\w{1,80}", str(record["tip"])) or not re.fullmatch(r"\w{1,80}", str(record["topic"])):
        problems.append("tip and topic must be plain names (tip_x, topic)")
    for k in ("source_sha256", *VERSION_KEYS):
        if not re.fullmatch(r"[0-9a-f]{64}", str(record[k])):
            problems.append(f"{k} must be 64 hex digits")
    for k in ("torch", "python"):
        if not re.fullmatch(r"\d+\.\d+(\.\d+)?[\w.+-]{0,40}", str(record[k])):
            problems.append(f"{k} must be a version like 2.13.0+cpu, got {record[k]!r}")
    if not re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", str(record["date"])):
        problems.append(f"date must look like 2026-11-22 06:39 UTC, got {record['date']!r}")
    if not isinstance(record["build_threads"], int) or record["build_threads"] < 1:
        problems.append("build_threads must be a positive integer")
    problems += _host_problems(record["hosts"])
    if "warnings" in record:
        problems += warnings_problems(record["warnings"])
    if "figures" in record:
        problems += figures_problems(record["figures"])
    if not isinstance(record.get("contributed", False), bool):
        problems.append("contributed must be true or false")
    result = {k: record[k] for k in RESULT_KEYS if k in record}
    if record.get("upgraded_from") == OLD_SET_SCHEMA:
        problems += _legacy_problems(record)
    else:
        problems += result_problems(result)
    for device in record.get("verdicts") or {}:
        if device not in record["hosts"]:
            problems.append(f"a decision on {device!r} but hosts does not describe that device")
    return problems


def machine_class(record: dict, device: str) -> str:
    """The machine class a record's result on ``device`` depends on (:mod:`tipsite.devices`)."""
    return devices_table.machine_class(device, (record.get("hosts") or {}).get(device))


# --- the torch-version matrix's data, checked as records are ----------------------------------

COMPAT_STATUSES = ("passed", "failed", "not applicable")


def compat_entry_problems(entry: Any) -> list[str]:
    """One tip's entry in a matrix file (tipsite/compat.py): what a record of it would hold (its
    verdicts and key figures, warnings, version), checked with the records' own checks."""
    if not isinstance(entry, dict):
        return ["an entry must be a dict"]
    problems = []
    if entry.get("status") not in COMPAT_STATUSES:
        problems.append(f"status must be one of {list(COMPAT_STATUSES)}")
    for k in ("sha256", *VERSION_KEYS):
        if k in entry and not re.fullmatch(r"[0-9a-f]{64}", str(entry[k])):
            problems.append(f"{k} must be 64 hex digits")
    verdicts_ = entry.get("verdicts", {})
    if not isinstance(verdicts_, dict):
        problems.append("verdicts must map a device to its verdict and key figure")
        verdicts_ = {}
    for device, v in verdicts_.items():
        if device not in devices() or not isinstance(v, dict):
            problems.append(f"verdicts[{device!r}] must be a known device's verdict")
            continue
        if v.get("verdict") not in verdicts():
            problems.append(f"verdicts[{device!r}]: verdict {v.get('verdict')!r} is not one of {verdicts()}")
        problems += [f"verdicts[{device!r}]: {p}" for p in key_problems(v.get("key"))]
    problems += warnings_problems(entry.get("warnings", []))
    for k in ("error", "min_torch", "topic", "date", "run", "device"):
        if entry.get(k) is not None and not _text(entry[k], 4000):
            problems.append(f"{k} must be text")
    if entry.get("seconds") is not None and not _finite(entry["seconds"]):
        problems.append("seconds must be a finite number")
    if not isinstance(entry.get("skipped", []), list) or not all(_text(s, 500) for s in entry.get("skipped", [])):
        problems.append("skipped must be a list of short texts")
    return problems


def compat_run_problems(run: Any) -> list[str]:
    """A matrix file: the run's provenance (its machine, as a record's hosts) and every entry."""
    if not isinstance(run, dict) or not isinstance(run.get("tips"), dict):
        return ["a matrix run must be a dict with 'tips'"]
    problems = []
    if "hosts" in run:
        problems += _host_problems(run["hosts"])
    for k in ("torch", "torch_build", "python", "date", "device", "device_name"):
        if run.get(k) is not None and not _text(run[k], 200):
            problems.append(f"{k} must be short text")
    for name, entry in run["tips"].items():
        if not re.fullmatch(r"tip_\w{1,80}", str(name)):
            problems.append(f"{name!r} is not a tip name")
            continue
        problems += [f"{name}: {p}" for p in compat_entry_problems(entry)]
    return problems


def figures_problems(figures: Any) -> list[str]:
    """The data behind a record's figures (tipsite/gallery.py): axes of labelled lines of finite
    points, as text and numbers only."""
    if not isinstance(figures, list):
        return ["figures must be a list"]
    for fig in figures:
        axes = fig.get("axes") if isinstance(fig, dict) else None
        if not isinstance(axes, list):
            return ["each figure needs a list of axes"]
        for ax in axes:
            if not isinstance(ax, dict) or not all(_text(ax.get(k, ""), 500) for k in
                                                   ("title", "xlabel", "ylabel", "xscale", "yscale")):
                return ["each axes needs text title, labels and scales"]
            for line in ax.get("lines") or []:
                if (not isinstance(line, dict) or not _text(line.get("label"), 300)
                        or not all(isinstance(line.get(k), list) and all(_finite(v) or v is None
                                                                         for v in line[k])
                                   for k in ("x", "y"))):
                    return ["each line needs a text label and lists of finite x and y"]
    return []


def write_record(path: Path, record: dict) -> None:
    """Write atomically: a reader never sees half a record."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def record_path(target_file: str | Path) -> Path:
    """``docs/tips/speed/tip_x.py`` -> ``docs/tips/speed/tip_x.result.json``."""
    target = Path(target_file)
    return target.with_name(target.stem + RECORD_SUFFIX)


def read_record(target_file: str | Path) -> dict | None:
    """The record beside an executed tip, or None; an invalid record raises, naming the file."""
    path = record_path(target_file)
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RecordError(f"{path}: cannot be read as JSON: {exc}") from None
    problems = record_problems(record)
    if problems:
        raise RecordError(f"{path}: " + "; ".join(problems))
    return record


# --- result sets ---------------------------------------------------------------------------------

def run_key(record: dict) -> tuple:
    """Records with the same key come from the same build configuration: one result set."""
    hosts_ = record["hosts"]
    return (record["torch"], record["build_threads"],
            *(hosts_[d]["name"] for d in sorted(hosts_)))


def set_label(record: dict) -> str:
    """``cpu-amd-epyc-torch2.13.0+cpu`` (``-1threads`` when not the default thread setting)."""
    hosts_ = record["hosts"]
    device = devices_table.primary(hosts_)
    slug = re.sub(r"[^a-z0-9]+", "-", hosts_[device]["name"].lower()).strip("-")[:40] or "unknown"
    label = f"{device}-{slug}-torch{record['torch']}"
    if record["build_threads"] != settings.TIPS_THREADS:
        label += f"-{record['build_threads']}threads"
    return label


def tip_records(tips_out_dir: Path | None = None, tips: Iterable[str] | None = None,
                gallery_dir: Path | None = None) -> list[dict]:
    """The records in a build's output folder, for ``tips`` (default: every tip in the gallery)."""
    from tipsite import tipmeta

    tips_out_dir = Path(tips_out_dir or settings.TIPS_OUT_DIR)
    wanted = set(tips) if tips is not None else {p.stem for p in tipmeta.tip_files(gallery_dir)}
    records = []
    for path in sorted(tips_out_dir.glob(f"*/*{RECORD_SUFFIX}")):
        if path.name[: -len(RECORD_SUFFIX)] in wanted:
            records.append(read_record(path.with_name(path.name[: -len(RECORD_SUFFIX)] + ".py")))
    return records


def make_set(records: list[dict]) -> dict:
    keys = {run_key(r) for r in records}
    if len(keys) != 1:
        raise RecordError(f"records from {len(keys)} build configurations cannot form one set: {sorted(keys)}")
    first = records[0]
    return {"schema": SET_SCHEMA, "torch": first["torch"], "build_threads": first["build_threads"],
            "hosts": first["hosts"], "records": sorted(records, key=lambda r: (r["topic"], r["tip"]))}


def export(out_dir: Path | None = None, tips_out_dir: Path | None = None,
           tips: Iterable[str] | None = None, suffix: str = "",
           gallery_dir: Path | None = None) -> list[Path]:
    """Write the build's records as result sets, one file per build configuration found.

    Two configurations never share a file: a name collision stops the export, naming both.
    """
    out_dir = Path(out_dir or settings.RESULTS_DIR)
    groups: dict[tuple, list[dict]] = {}
    for record in tip_records(tips_out_dir, tips, gallery_dir):
        groups.setdefault(run_key(record), []).append(record)
    names: dict[str, tuple] = {}
    for key, group in groups.items():
        name = f"{set_label(group[0])}{suffix}.json"
        if name in names:
            raise RecordError(f"two build configurations would both be written to {name}: "
                              f"{names[name]} and {key}")
        names[name] = key
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, key in names.items():
        path = out_dir / name
        write_record(path, make_set(groups[key]))
        written.append(path)
    return sorted(written)


def paths_from_env(value: str | None = None) -> list[Path]:
    """The result-set files named by ``TIPS_RESULT_SETS`` (or ``value``), folders expanded."""
    value = os.environ.get(ENV_VAR, "") if value is None else value
    paths: list[Path] = []
    for part in value.split(os.pathsep):
        if not part.strip():
            continue
        path = Path(part.strip()).expanduser()
        if path.is_dir():
            paths += sorted(path.glob("*.json"))
        elif path.is_file():
            paths.append(path)
        else:
            raise RecordError(f"{ENV_VAR}: {part!r} is neither a result-set file nor a folder")
    return paths


def committed_paths() -> list[Path]:
    return sorted(DATA_DIR.glob("*.json")) if DATA_DIR.is_dir() else []


def load_set(path: Path) -> dict:
    """Read and check a result set; raise :class:`RecordError` naming the file and the problem."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RecordError(f"{path}: cannot be read as JSON: {exc}") from None
    if isinstance(data, dict) and data.get("schema") == OLD_SET_SCHEMA:
        raise RecordError(f"{path}: a {OLD_SET_SCHEMA} result set labels every record with the "
                          "build's device, even CPU-only tips run on a GPU machine; convert it with "
                          "`python -m tipsite.records upgrade` and the tips' sources it was built from")
    if isinstance(data, dict) and data.get("schema") == V2_SET_SCHEMA:
        raise RecordError(f"{path}: a {V2_SET_SCHEMA} result set knows each tip's version only as the "
                          "SHA-256 of its whole file; add the version digests with `python -m "
                          "tipsite.records upgrade-v2` (it finds each file in the git history)")
    if not isinstance(data, dict) or data.get("schema") != SET_SCHEMA:
        raise RecordError(f"{path}: not a result set (schema {SET_SCHEMA!r} expected)")
    records = data.get("records")
    if not isinstance(records, list):
        raise RecordError(f"{path}: 'records' must be a list")
    for i, record in enumerate(records):
        problems = record_problems(record)
        if problems:
            raise RecordError(f"{path}: record {i}: " + "; ".join(problems))
    return {**data, "path": str(path)}


def load_sets(paths: Iterable[Path]) -> list[dict]:
    return [load_set(p) for p in paths]


def fingerprint(paths: Iterable[Path]) -> str:
    """Changes whenever the given result sets change, so the pages showing them are rebuilt."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(str(Path(path).resolve()).encode())
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()


# --- what a page shows for one tip --------------------------------------------------------------

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


# --- a result set from a reader's machine, vetted before it is committed ------------------------

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


# --- result sets of schema 1 (one device per build) -------------------------------------------

def _legacy_problems(record: dict) -> list[str]:
    problems = []
    for device, decision in (record.get("verdicts") or {}).items():
        if device not in devices() or not isinstance(decision, dict):
            problems.append(f"verdicts[{device!r}] must be a known device's decision")
            continue
        if decision.get("verdict") not in verdicts() or decision.get("device") != device:
            problems.append(f"verdicts[{device!r}]: bad verdict or device")
        problems += key_problems(decision.get("key"))
    if not _text(record.get("rule"), 1000):
        problems.append("rule must be a string")
    for m in record.get("measurements") or []:
        if not isinstance(m, dict) or not _finite(m.get("value")) or not all(
                _text(m.get(k), 200) for k in ("variant", "metric", "unit")):
            problems.append("a measurement needs text variant, metric, unit and a finite value")
    return problems


def upgrade_v1(old: dict, sources: dict[str, dict], *, cpu_name: str, cuda_host: dict) -> dict:
    """A schema-1 result set from a GPU machine as a schema-2 set, each record on its true device.

    Schema 1 labelled every record with the build's device. ``sources`` gives, per tip, the
    SHA-256 and ``sphinx_gallery_tips_devices`` of the tip file that ran: a tip that measured no
    CUDA there is a CPU result of that machine's CPU (``cpu_name``), the others are CUDA results.
    Schema 1 kept no samples, so these decisions cannot be re-derived: they are marked
    ``"legacy": True`` and the pages say so.
    """
    if old.get("schema") != OLD_SET_SCHEMA:
        raise RecordError(f"not a {OLD_SET_SCHEMA} result set")
    records = []
    for r in old["records"]:
        info = sources.get(r["tip"])
        if info is None:
            raise RecordError(f"{r['tip']}: no source recorded for it")
        device = "cuda" if (r["device"] == "cuda" and "cuda" in info["devices"]) else "cpu"
        records.append({
            "schema": V2_RECORD_SCHEMA, "upgraded_from": OLD_SET_SCHEMA,
            "tip": r["tip"], "topic": r["topic"], "source_sha256": info["sha256"],
            "rule": r["rule"],
            "verdicts": {device: {"device": device, "verdict": r["verdict"], "key": r["key"],
                                  "threads": [r["threads"]], "legacy": True}},
            "measurements": [{**m, "device": device} for m in r["measurements"]],
            "skipped": r["skipped"], "torch": r["torch"], "python": r["python"],
            "build_threads": r.get("build_threads", r["threads"]), "date": r["date"],
            "hosts": {"cpu": {"name": cpu_name}, "cuda": cuda_host},
        })
    return {"schema": V2_SET_SCHEMA, "upgraded_from": OLD_SET_SCHEMA, "torch": old["torch"],
            "build_threads": records[0]["build_threads"], "hosts": records[0]["hosts"],
            "records": records}


# --- result sets of schema 2 (a tip's version as its file's SHA-256) ----------------------------

def upgrade_v2(old: dict, versions: dict[str, dict]) -> dict:
    """A schema-2 result set as a schema-3 one: each record gains the version digests of the
    file it ran, looked up by that file's SHA-256 in ``versions`` (:func:`history_versions`)."""
    if old.get("schema") != V2_SET_SCHEMA:
        raise RecordError(f"not a {V2_SET_SCHEMA} result set")
    records = []
    for r in old["records"]:
        found = versions.get(r["source_sha256"])
        if found is None:
            raise RecordError(f"{r['tip']}: no tip file with SHA-256 {r['source_sha256'][:12]} in the "
                              "history searched: cannot tell which version of the tip it measured")
        records.append({**r, "schema": RECORD_SCHEMA, **{k: found[k] for k in VERSION_KEYS}})
    return {**old, "schema": SET_SCHEMA, "records": records}


KIT = "tipsite/tipkit.py"


def history_versions(paths: Iterable[str] = ("gallery",), root: Path = settings.ROOT,
                     tips: Iterable[str] | None = None) -> dict[str, dict]:
    """SHA-256 of every tip file the git history holds -> its version digests, tip and commit.

    A tip that imports its helpers is digested with the tipkit.py of the same commit; the file
    of a tip that carried them is digested as it is. ``tips`` limits the search to those names.
    """
    import subprocess

    from tipsite import tipsource

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              check=True).stdout

    wanted = set(tips) if tips is not None else None
    found: dict[str, dict] = {}
    seen: set[tuple[str, str]] = set()
    kits: dict[str, tipsource.Kit] = {}
    for commit in git("log", "--format=%H", "--", *paths, KIT).split():
        listing = git("ls-tree", "-r", commit, "--", *paths, KIT).splitlines()
        blobs = {line.split("\t", 1)[1]: line.split()[2] for line in listing}
        kit_blob = blobs.get(KIT)
        if kit_blob and kit_blob not in kits:
            try:
                kits[kit_blob] = tipsource.kit_from_text(git("cat-file", "blob", kit_blob))
            except (SyntaxError, ValueError, KeyError):
                kits[kit_blob] = tipsource.current_kit()
        kit = kits.get(kit_blob) or tipsource.current_kit()
        for path, blob in blobs.items():
            name = Path(path).name
            if path == KIT or not (name.startswith("tip_") and name.endswith(".py")):
                continue
            if wanted is not None and Path(path).stem not in wanted:
                continue
            if (blob, kit_blob) in seen:
                continue
            seen.add((blob, kit_blob))
            text = git("cat-file", "blob", blob)
            sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
            try:
                version = tipsource.version(text, path, kit)
                download = tipsource.inline(text, path, kit)
            except (tipsource.TipSourceError, KeyError):
                continue
            entry = {"tip": Path(path).stem, "commit": commit, **version}
            found.setdefault(sha, entry)
            found.setdefault(hashlib.sha256(download.encode("utf-8")).hexdigest(), entry)
    return found


# --- command line -------------------------------------------------------------------------------

ROW_KEYS = ("tip", "device", "verdict", "comparison", "median", "low", "high", "rounds", "unit",
            "host", "threads", "torch", "date")


def rows(records: Iterable[dict]) -> list[dict]:
    """Flat rows, one per comparison (or one per decision without comparisons)."""
    out = []
    for record in records:
        for device, d in (record.get("verdicts") or {}).items():
            base = {"tip": record["tip"], "device": device, "verdict": d["verdict"],
                    "host": record["hosts"].get(device, {}).get("name"),
                    "threads": "/".join(map(str, d.get("threads", []))),
                    "torch": record["torch"], "date": record["date"]}
            comparisons = d.get("comparisons") or []
            for c in comparisons:
                out.append({**base, "comparison": c["name"], "median": c["median"], "low": c["low"],
                            "high": c["high"], "rounds": len(c["ratios"]),
                            "unit": "x" if c["measure"] == "ratio" else c["unit"]})
            if not comparisons:
                out.append({**base, "comparison": None, "median": None, "low": None, "high": None,
                            "rounds": None, "unit": None})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tipsite.records", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    exp = sub.add_parser("export", help="write this build's records as result set(s)")
    exp.add_argument("--out", type=Path, default=settings.RESULTS_DIR, help="folder for the result sets")
    exp.add_argument("--tips-out", type=Path, default=settings.TIPS_OUT_DIR, help="the build's executed-tips folder")
    exp.add_argument("--tips", help="comma-separated tip names (default: every tip in the gallery)")
    exp.add_argument("--suffix", default="", help="added to each file name, e.g. -shard1of2")
    rws = sub.add_parser("rows", help="print result sets as CSV rows, one per comparison")
    rws.add_argument("files", nargs="+", type=Path)
    dev = sub.add_parser("expect-device", help="fail unless every tip measuring DEVICE has its decision "
                                                "on DEVICE and no tip claims DEVICE that does not measure it")
    dev.add_argument("device")
    dev.add_argument("paths", nargs="+", help="result-set files or folders")
    up = sub.add_parser("upgrade", help="convert a schema-1 result set from a GPU machine")
    up.add_argument("old", type=Path)
    up.add_argument("--sources", type=Path, required=True,
                    help="JSON: {'tips': {tip: {'sha256', 'devices'}}} of the sources it built")
    up.add_argument("--cpu-name", required=True, help="what is known of that machine's CPU")
    up.add_argument("--cuda-host", required=True, help="JSON: {'name', 'cuda', 'driver'}")
    up.add_argument("--out", type=Path, required=True)
    vet = sub.add_parser("vet", help="check result sets from other machines before they are committed")
    vet.add_argument("files", nargs="+", type=Path)
    up2 = sub.add_parser("upgrade-v2", help="add the version digests to schema-2 result sets, in place")
    up2.add_argument("files", nargs="+", type=Path)
    up2.add_argument("--versions", type=Path,
                     help="JSON {sha256: {code_sha256, helpers_sha256}} (default: from the git history)")
    args = parser.parse_args(argv)
    try:
        if args.command == "vet":
            failed = 0
            for path in args.files:
                problems = vet_set(path)
                if problems:
                    failed += 1
                    print(f"refused: {path}\n  " + "\n  ".join(problems), file=sys.stderr)
                else:
                    print(f"accepted: {path}")
            return 1 if failed else 0
        if args.command == "upgrade-v2":
            versions = (json.loads(args.versions.read_text(encoding="utf-8")) if args.versions
                        else history_versions())
            for path in args.files:
                new = upgrade_v2(json.loads(path.read_text(encoding="utf-8")), versions)
                write_record(path, new)
                load_set(path)
                print(f"upgraded: {path} ({len(new['records'])} records)")
        elif args.command == "export":
            tips = args.tips.split(",") if args.tips else None
            for path in export(args.out, args.tips_out, tips, args.suffix):
                print(f"result set: {path}")
        elif args.command == "expect-device":
            return expect_device(args.device, args.paths)
        elif args.command == "upgrade":
            old = json.loads(args.old.read_text(encoding="utf-8"))
            sources = json.loads(args.sources.read_text(encoding="utf-8"))["tips"]
            new = upgrade_v1(old, sources, cpu_name=args.cpu_name, cuda_host=json.loads(args.cuda_host))
            write_record(args.out, new)
            print(f"upgraded to {V2_SET_SCHEMA}: {args.out} ({len(new['records'])} records); "
                  "now add the version digests: python -m tipsite.records upgrade-v2 FILE")
        else:
            writer = csv.DictWriter(sys.stdout, fieldnames=ROW_KEYS)
            writer.writeheader()
            for result_set in load_sets(args.files):
                writer.writerows(rows(result_set["records"]))
    except RecordError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


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


if __name__ == "__main__":
    sys.exit(main())
