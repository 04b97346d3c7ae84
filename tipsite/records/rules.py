"""What each version of each tip decides by: the rule manifest, ``conf/tip-rules.json``.

A record carries its tip's rule, cases, groups, thresholds and key; a record from another machine
must not be trusted for them. The manifest holds, for each version of each tip's own code
(``code_sha256``) and each device, the **shape** of the decision the project's own runs of that
code made (:func:`shape`): the rule, the cases, the groups and the comparisons in them (each
with its threshold, measure, metric, unit and variants), the facts with the kinds of value they
took, ``about``, and the key figure (its name, unit, and the comparison it is). Vet refuses a
record whose decision has another shape (:func:`shape_problems`). Everything else in a decision
is a measurement: the samples, from which every figure and outcome is recomputed
(:func:`tipsite.tipkit.rederive`), and the facts' values.

The manifest is made from runs, never typed: ``python -m tipsite.records rules --run TIP...``
runs the tips' downloads on this machine (``--fake-cuda`` for their CUDA path: its figures mean
nothing, its shape is the code's), ``rules --from SET...`` reads result sets of the project's
own builds. ``tests/test_records.py`` fails while a current tip version has no entry.
A tip whose comparisons depend on the machine (a sweep over its core count, say) needs one run
of each kind of machine: an entry holds every shape seen.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from conf import settings
from tipsite.records.check import RecordError

RULES_PATH = settings.ROOT / "conf" / "tip-rules.json"
COMPARISON_FIELDS = ("threshold", "measure", "metric", "unit", "baseline", "candidate")
ABOUT = ("A tip version's decision shape per device, made from the project's own runs "
         "(tipsite/records/rules.py); regenerate with `python -m tipsite.records rules --run TIP` "
         "(and --fake-cuda for CUDA). Never edit by hand.")


def _kind(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return "text"


def shape(record: dict, device: str) -> dict:
    """What the tip's code decides by on ``device``, from one of its records; the facts' kinds
    as a list (an entry merges the kinds that runs saw)."""
    d = record["verdicts"][device]
    comparisons = {c["name"]: {k: c[k] for k in COMPARISON_FIELDS} for c in d.get("comparisons") or []}
    key = d.get("key")
    return {
        "rule": record["rule"], "cases": d["cases"], "about": d.get("about"),
        "groups": {n: list(m) for n, m in sorted(d["groups"].items())},
        "comparisons": dict(sorted(comparisons.items())),
        "facts": {n: [_kind(v)] for n, v in sorted(d["facts"].items())},
        "key": None if key is None else {"name": key["name"], "unit": key["unit"],
                                         "of": key["name"] if key["name"] in comparisons else None},
    }


def entry_key(record: dict) -> str:
    return f"{record['tip']}:{record['code_sha256']}"


def load(path: Path | None = None) -> dict:
    """The manifest: ``{"tips": {"tip_x:<code_sha256>": {device: [shape, ...]}}}``."""
    path = Path(path or RULES_PATH)
    if not path.exists():
        return {"about": ABOUT, "tips": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RecordError(f"{path}: cannot be read as JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("tips"), dict):
        raise RecordError(f"{path}: not a rule manifest")
    return data


def add(manifest: dict, record: dict) -> list[str]:
    """Add the shapes of ``record``'s decisions to ``manifest``; returns what was new."""
    added = []
    entry = manifest["tips"].setdefault(entry_key(record), {})
    for device in sorted(record.get("verdicts") or {}):
        new = shape(record, device)
        shapes = entry.setdefault(device, [])
        for known in shapes:
            if {**known, "facts": None} == {**new, "facts": None} and set(known["facts"]) == set(new["facts"]):
                for name, kinds in new["facts"].items():
                    known["facts"][name] = sorted(set(known["facts"][name]) | set(kinds))
                break
        else:
            shapes.append(new)
            added.append(f"{record['tip']} {device}")
    return added


def merge(manifest: dict, other: dict) -> list[str]:
    """Add every shape of ``other`` (another manifest) to ``manifest``; returns what was new."""
    added = []
    for key, devices in other["tips"].items():
        tip, code = key.rsplit(":", 1)
        for device, shapes in devices.items():
            for s in shapes:
                facts = s["facts"]
                for kinds in itertools.product(*facts.values()) if facts else [()]:
                    record = {"tip": tip, "code_sha256": code, "rule": s["rule"], "verdicts": {device: {
                        "cases": s["cases"], "about": s["about"], "groups": s["groups"],
                        "comparisons": [{"name": n, **c} for n, c in s["comparisons"].items()],
                        "facts": {n: _EXAMPLE[k] for n, k in zip(facts, kinds)},
                        "key": None if s["key"] is None else {"name": s["key"]["name"], "unit": s["key"]["unit"]}}}}
                    added += add(manifest, record)
    return sorted(set(added))


_EXAMPLE = {"none": None, "bool": True, "number": 1.0, "text": "text"}


def write(manifest: dict, path: Path | None = None) -> None:
    """Write the manifest; a tip and device it now knows leaves ``missing`` (the current tip
    versions whose runs failed where the manifest was made, each with why: vet refuses their
    records until a run adds them)."""
    path = Path(path or RULES_PATH)
    known = {f"{key.rsplit(':', 1)[0]} {d}" for key, devices in manifest["tips"].items() for d in devices}
    missing = {k: v for k, v in sorted(manifest.get("missing", {}).items()) if k not in known}
    data = {"about": ABOUT, "missing": missing, "tips": dict(sorted(manifest["tips"].items()))}
    path.write_text(json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")


def _differences(known: dict, found: dict) -> list[str]:
    """What differs between a known shape and a record's. Names that a tip computes from what it
    measured (sizes chosen from a GPU's calibration, the key at the weakest point) are not
    pinned: the groups' names, each comparison's fixed fields (threshold, measure, metric, unit,
    variants) as a set, and the key's unit and kind are; so are the rule, cases and ``about``."""
    out = [k for k in ("rule", "cases", "about") if known[k] != found[k]]
    if set(known["groups"]) != set(found["groups"]):
        out.append("groups (names)")
    members = {m for ms in found["groups"].values() for m in ms}
    if not members <= set(found["comparisons"]):
        out.append("groups (members that are no comparison)")

    def fields(shape):
        return {tuple(json.dumps(c[f]) for f in COMPARISON_FIELDS) for c in shape["comparisons"].values()}

    if fields(known) != fields(found):
        out.append("comparisons (thresholds, measures, units or variants)")

    def key(shape):
        k = shape["key"]
        return None if k is None else (k["unit"], k.get("of") is not None)

    if key(known) != key(found):
        out.append("key (unit, or whether it is a comparison)")
    if set(known["facts"]) != set(found["facts"]):
        out.append("facts (names)")
    else:
        out += [f"fact {n!r} ({kinds[0]}, where that code gives {' or '.join(known['facts'][n])})"
                for n, kinds in found["facts"].items() if kinds[0] not in known["facts"][n]]
    return out


def shape_problems(record: dict, device: str, manifest: dict) -> list[str]:
    """Why ``record``'s decision on ``device`` is not one its tip version's code makes."""
    shapes = manifest["tips"].get(entry_key(record), {}).get(device)
    if not shapes:
        return [f"no rule is known for this version of the tip on {device} (code "
                f"{record['code_sha256'][:12]}; conf/tip-rules.json, `python -m tipsite.records rules`)"]
    found = shape(record, device)
    differences = [_differences(known, found) for known in shapes]
    if any(not d for d in differences):
        return []
    closest = min(differences, key=len)
    return [f"its {device} decision is not the one this version of the tip makes: "
            f"{'; '.join(closest)} differ from conf/tip-rules.json"]
