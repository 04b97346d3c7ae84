"""Checking records: a tip's ``RESULT``, a decision (re-derived from its own evidence), a record
with its provenance, the torch-release matrix's entries and the data behind a record's figures.
Every check returns a list of problems (empty when valid); nothing here reads or writes files."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

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


def decision_verdicts() -> list[str]:
    """What a decision may say: a verdict, or ``busy`` (a deciding comparison's cores were not
    free: no verdict for the claim; docs: record-format, tips-record/4)."""
    return list(dict.fromkeys([*verdicts(), BUSY]))


BUSY = "busy"


def devices() -> list[str]:
    from tipsite import tipmeta

    return list(tipmeta.vocab()["devices"])


# --- checking: a tip's RESULT, a decision, a record ------------------------------------------------

# Bounds on what a record may hold: no honest run comes near them, and they keep every check
# (re-deriving an interval costs more than linear time in its samples) within a fixed cost per
# byte of a file (the size limit of a result set is in tipsite/records/store.py).
MAX_SAMPLES = 200  # rounds of one comparison (compare_times stops at 40 rounds by default)
MAX_THREADS = 4096  # threads, cores
MAX_MAGNITUDE = 1e15  # any sample, threshold or figure


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _text(x: Any, max_len: int = 2000) -> bool:
    return isinstance(x, str) and len(x) <= max_len


def _count(x: Any, low: int = 1, high: int = MAX_THREADS) -> bool:
    """An integer (not a bool) in [low, high]."""
    return isinstance(x, int) and not isinstance(x, bool) and low <= x <= high



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
    if not _count(c["threads"]):
        problems.append(f"{where}: threads must be an integer from 1 to {MAX_THREADS}")
    for k in ("median", "low", "high", "threshold"):
        if not _finite(c[k]) or abs(c[k]) > MAX_MAGNITUDE:
            problems.append(f"{where}: {k} must be a finite number within ±{MAX_MAGNITUDE:g}, got {c[k]!r}")
    if c["measure"] == "ratio" and _finite(c["threshold"]) and not 0 <= c["threshold"] <= 1e4:
        problems.append(f"{where}: a ratio's threshold of {c['threshold']!r} is outside [0, 10000]")
    if c["x"] is not None and (not _finite(c["x"]) or abs(c["x"]) > MAX_MAGNITUDE):
        problems.append(f"{where}: x must be a finite number or None")
    lists = [c[k] for k in ("base", "cand", "ratios")]
    if not all(isinstance(v, list) and v for v in lists):
        problems.append(f"{where}: base, cand and ratios must be non-empty lists of finite numbers")
    elif any(len(v) > MAX_SAMPLES for v in lists):
        problems.append(f"{where}: more than {MAX_SAMPLES} samples")
    elif not all(_finite(x) and abs(x) <= MAX_MAGNITUDE for v in lists for x in v):
        problems.append(f"{where}: base, cand and ratios must be non-empty lists of finite numbers "
                        f"within ±{MAX_MAGNITUDE:g}")
    elif len({len(v) for v in lists}) != 1:
        problems.append(f"{where}: base, cand and ratios differ in length")
    elif c["measure"] == "ratio" and any(v == 0 for v in c["cand"]):
        problems.append(f"{where}: a ratio with a candidate sample of 0")
    return problems + _timing_problems(c, where) + _cores_problems(c, where)


def _cores_problems(c: dict, where: str) -> list[str]:
    """The optional ``cores`` and ``kernels`` of a timing (docs: record-format, tips-record/4)."""
    problems = []
    if "cores" in c:
        cores = c["cores"]
        ok = (isinstance(cores, dict) and {"needed", "others", "free"} <= set(cores)
              <= {"needed", "machine", "others", "free"} and _count(cores["needed"])
              and ("machine" not in cores or _count(cores["machine"]))
              and (cores["others"] is None
                   or (_finite(cores["others"]) and 0 <= cores["others"] <= MAX_THREADS))
              and (cores["free"] is None or isinstance(cores["free"], bool)))
        if not ok:
            problems.append(f"{where}: cores is {{'needed': 1..{MAX_THREADS}, 'machine': 1..{MAX_THREADS}, "
                            f"'others': null or cores in [0, {MAX_THREADS}], 'free': null, true or false}}")
        elif "machine" in cores and cores["others"] is not None:
            # compare_times' rule (tipkit.cores_free): recomputed, never taken from the file
            free = cores["others"] < cores["machine"] - min(cores["needed"], cores["machine"]) + 0.25
            if cores["free"] is not free:
                problems.append(f"{where}: cores 'free' is {cores['free']} but its readings give {free}")
    if "kernels" in c:
        kernels = c["kernels"]
        if not (isinstance(kernels, dict) and set(kernels) == {"base", "cand"}
                and all(_count(v, 0, 10**9) for v in kernels.values())):
            problems.append(f"{where}: kernels is {{'base', 'cand'}}: counts of GPU activity records")
    return problems


def _pair_ok(value: Any) -> bool:
    return (isinstance(value, dict) and set(value) == {"base", "cand"}
            and all(_finite(v) and 0 <= v <= 3600 for v in value.values()))


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
            problems.append(f"{where}: device_time and window need base and cand, seconds in [0, 3600]")
        elif any(c["window"][k] <= 0 for k in ("base", "cand")):
            problems.append(f"{where}: a window of 0 seconds")
        if c["bound"] not in ("device", "host"):
            problems.append(f"{where}: bound must be 'device' or 'host'")
    if "work" in c:
        work = c["work"]
        amounts = [k for k in ("flops", "bytes") if k in (work if isinstance(work, dict) else {})]
        if (not isinstance(work, dict) or len(amounts) != 1 or not _finite(work[amounts[0]])
                or not 0 < work[amounts[0]] <= 1e18 or not _text(work.get("limit", ""), 60)
                or set(work) - {"flops", "bytes", "limit"}):
            problems.append(f"{where}: work is {{'flops' or 'bytes': a positive number, 'limit': name}}")
    return problems


def calibration_problems(calibration: Any) -> list[str]:
    """A GPU's calibration (tipkit.calibrate): names to positive finite rates and times."""
    if not isinstance(calibration, dict) or not all(
            _text(k, 60) and re.fullmatch(r"[a-z0-9_]+", k) and _finite(v) and 0 < v <= 1e18
            for k, v in calibration.items()) or not 0 < len(calibration) <= 50:
        return ["calibration must map plain names to positive finite numbers (at most 1e18)"]
    return []


def _fact_ok(value: Any) -> bool:
    return (value is None or isinstance(value, bool) or (_finite(value) and abs(value) <= MAX_MAGNITUDE)
            or _text(value, 300))


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
    if decision["verdict"] not in decision_verdicts():
        problems.append(f"verdict {decision['verdict']!r} is not one of {decision_verdicts()}")
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
    if not (isinstance(decision["threads"], list) and 0 < len(decision["threads"]) <= 64
            and all(_count(t) for t in decision["threads"])):
        problems.append(f"threads must be a non-empty list of thread counts (1 to {MAX_THREADS})")
    problems += key_problems(decision["key"])
    about = decision.get("about")
    if not (about in (None, "device", "host") or (
            isinstance(about, dict) and all(_text(k, 200) and v in ("device", "host") for k, v in about.items()))):
        problems.append("about must be 'device', 'host', null, or a group's name to either")
    if decision.get("why") is not None and not _text(decision["why"], 500):
        problems.append("why must be a short text or null")
    if decision["verdict"] in ("inconclusive", "busy") and not decision.get("why"):
        problems.append(f"a verdict of {decision['verdict']!r} says why")
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
        if k in key and key[k] is not None and (not _finite(key[k]) or abs(key[k]) > MAX_MAGNITUDE):
            problems.append(f"key {k} must be a finite number within ±{MAX_MAGNITUDE:g}, got {key[k]!r}")
    if "value" in key and key["value"] is None:
        problems.append("key value must be a finite number")
    if key.get("rounds") is not None and not _count(key["rounds"], 1, MAX_SAMPLES):
        problems.append(f"key rounds must be a count from 1 to {MAX_SAMPLES}")
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
    if not isinstance(measurements, list) or len(measurements) > 1000:
        problems.append("RESULT['measurements'] must be a list of at most 1000")
        measurements = []
    for i, m in enumerate(measurements):
        if not isinstance(m, dict) or not MEASUREMENT_KEYS <= m.keys():
            problems.append(f"RESULT['measurements'][{i}] needs {sorted(MEASUREMENT_KEYS)}")
            continue
        spread = m.get("spread")
        if (not _finite(m["value"]) or abs(m["value"]) > MAX_MAGNITUDE
                or (spread is not None and not (_finite(spread) and 0 <= spread <= MAX_MAGNITUDE))):
            problems.append(f"RESULT['measurements'][{i}]: value and spread must be finite numbers "
                            f"within ±{MAX_MAGNITUDE:g} (a spread >= 0)")
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


def _host_problems(hosts_: Any) -> list[str]:
    if not isinstance(hosts_, dict) or "cpu" not in hosts_:
        return ["hosts must describe at least the CPU"]
    problems = []
    for device, info in hosts_.items():
        if device not in devices() or not isinstance(info, dict) or not _text(info.get("name"), 200):
            problems.append(f"hosts[{device!r}] must be a known device with a name")
            continue
        if len(info) > 20:
            problems.append(f"hosts[{device!r}] has more than 20 fields")
        for k, v in info.items():
            ok = (_text(k, 40) and (v is None or (_finite(v) and abs(v) <= MAX_MAGNITUDE) or _text(v, 200)
                  or (isinstance(v, list) and len(v) <= 200 and all(_text(x, 40) for x in v))))
            if not ok:
                problems.append(f"hosts[{device!r}][{k!r}] must be text, a number or a list of flags")
        if "cores" in info and not _count(info["cores"]):
            problems.append(f"hosts[{device!r}]['cores'] must be an integer from 1 to {MAX_THREADS}")
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
    if not _count(record["build_threads"]):
        problems.append(f"build_threads must be an integer from 1 to {MAX_THREADS}")
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
