"""Generate the evidence the checker ships with (``tipsite/checker/evidence.json``) from the records.

``python -m tipsite.checker.shipdata`` rewrites the file from the committed result sets
(``docs/_data/results/``) and the tips' current sources; ``--check`` only says whether it is
current (exit 1 if not). The verdicts are picked exactly as the site picks them, through
:mod:`tipsite.records`: for each tip a rule quotes, each device and each torch release that
measured it (and any release), the state :func:`tipsite.records.device_states` gives with the
tip's version (:func:`tipsite.records.tip_version`).

The checker's ``--records`` builds the same data in memory from this checkout's build, the
committed sets and ``TIPS_RESULT_SETS`` instead of reading the file.

Runs in the repository only (it reads ``conf/`` and the gallery); the installed checker reads the
file (:mod:`tipsite.checker.evidence`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from conf import settings
from tipsite import compat, records, tipmeta
from tipsite.checker import evidence
from tipsite.checker.registry import RULES

DATA_PATH = Path(__file__).with_name(evidence.DATA_FILE)


COMPAT_DIR = settings.DOCS_DIR / "_data" / "compat"  # the torch-release matrix's runs (tipsite/compat.py)


def _state(state: dict, device: str) -> dict:
    if state["state"] == records.NOT_MEASURED:
        return {}
    d, r = state["decision"], state["record"]
    host = (r["hosts"].get(device) or {}).get("name")
    origin = state["origin"]
    return {"state": state["state"], "verdict": d["verdict"], "key": d.get("key"), "torch": r["torch"],
            "host": host, "machine_class": records.machine_class(r, device), "date": r["date"],
            "legacy": bool(d.get("legacy")),
            "set": origin if origin == "this build" else "/".join(Path(origin).parts[-2:])
            if Path(origin).parent.name == "compat" else Path(origin).name}


def compat_sets(paths: list[Path] | None = None) -> tuple[list[dict], list[str]]:
    """The torch-release matrix's runs as result sets: each tip's entry that passed with verdicts
    becomes a record of that run (its torch, machine and date, the tip's version digests), so a
    release's verdicts count per torch release, device and machine class like any record's."""
    paths = sorted(COMPAT_DIR.glob("torch-*.json")) if paths is None else paths
    sets, warnings = [], []
    for path in paths:
        try:  # its verdicts re-derived from its result set's samples (compat.read)
            run = compat.read(Path(path))
        except records.RecordError as exc:
            warnings.append(f"matrix run ignored: {exc}")
            continue
        recs = []
        for name, entry in sorted(run["tips"].items()):
            if entry.get("status") != "passed" or not entry.get("verdicts") or not all(
                    entry.get(k) for k in records.VERSION_KEYS):
                continue
            recs.append({"tip": name, "topic": entry.get("topic"), "torch": run.get("torch_build") or run["torch"],
                         "date": entry.get("date") or run["date"], "hosts": run.get("hosts") or {},
                         "verdicts": entry["verdicts"], "source_sha256": entry.get("sha256"),
                         **{k: entry[k] for k in records.VERSION_KEYS}})
        sets.append({"path": str(path), "records": recs})
    return sets, warnings


def _release_text(version: str) -> str | None:
    rel = evidence.release(version)
    return ".".join(map(str, rel)) if rel else None


def tip_entry(tip: tipmeta.Tip, this: dict | None, sets: list[dict], devices: list[str]) -> dict:
    version = records.tip_version(tip.path)
    mine = [r for s in sets for r in s["records"] if r["tip"] == tip.name] + ([this] if this else [])
    releases = sorted({rel for r in mine if (rel := _release_text(r["torch"]))},
                      key=lambda t: tuple(int(x) for x in t.split(".")))
    states: dict[str, dict] = {}
    for device in devices:
        by_release = {}
        found = _state(records.device_states(tip.name, [device], version, this, sets)[device], device)
        if found:
            by_release[evidence.ANY] = found
        for rel in releases:
            keep_this = this if this is not None and _release_text(this["torch"]) == rel else None
            kept = [{**s, "records": [r for r in s["records"] if _release_text(r["torch"]) == rel]} for s in sets]
            found = _state(records.device_states(tip.name, [device], version, keep_this, kept)[device], device)
            if found:
                by_release[rel] = found
        if by_release:
            states[device] = by_release
    return {"title": tip.title, "topic": tip.topic, "kind": tip.kind, "devices": list(tip.devices),
            "states": states}


def build(*, result_paths: list[Path] | None = None, tips_out_dir: Path | None = None,
          gallery_dir: Path | None = None, compat_paths: list[Path] | None = None) -> dict:
    """The evidence for every tip a rule quotes, per torch release, device and machine class.
    ``result_paths`` default to the committed sets; the torch-release matrix's runs
    (``docs/_data/compat/``, or ``compat_paths``; ``[]`` for none) count as well; ``tips_out_dir`` adds that
    build's records ("this build"), as a site build would."""
    warnings: list[str] = []
    paths = records.committed_paths() if result_paths is None else result_paths
    sets = []
    for path in paths:
        try:
            sets.append(records.load_set(path))
        except records.RecordError as exc:
            warnings.append(f"result set ignored: {exc}")
    matrix, problems = compat_sets(compat_paths)
    sets += matrix
    warnings += problems
    wanted = {r.tip for r in RULES.values()}
    tips = {}
    for path in tipmeta.tip_files(gallery_dir):
        if path.stem not in wanted:
            continue
        try:
            tip = tipmeta.read_tip(path)
        except tipmeta.TipError as exc:
            warnings.append(f"tip metadata unreadable, its findings show no verdict: {exc}")
            continue
        this = None
        if tips_out_dir is not None:
            try:
                this = records.read_record(Path(tips_out_dir) / tip.topic / tip.path.name)
            except records.RecordError as exc:
                warnings.append(f"built record ignored: {exc}")
        tips[tip.name] = tip_entry(tip, this, sets, records.devices())
    return {"schema": evidence.SCHEMA,
            "sets": ([Path(p).name for p in paths] if result_paths is None else [str(p) for p in paths])
            + ["/".join(Path(m["path"]).parts[-2:]) for m in matrix],
            "devices": {d: records.device_word(d) for d in records.devices()},
            "tips": dict(sorted(tips.items())),
            **({"warnings": warnings} if warnings else {})}


def live() -> dict:
    """``--records``: this checkout's build, the committed sets and ``TIPS_RESULT_SETS``."""
    try:
        extra = records.paths_from_env()
        warnings = []
    except records.RecordError as exc:
        extra, warnings = [], [str(exc)]
    data = build(result_paths=records.committed_paths() + extra, tips_out_dir=settings.TIPS_OUT_DIR)
    if warnings:
        data["warnings"] = warnings + data.get("warnings", [])
    return data


def dumps(data: dict) -> str:
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tipsite.checker.shipdata", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is not what the records give")
    args = parser.parse_args(argv)
    data = build()
    if data.get("warnings"):
        for w in data["warnings"]:
            print(f"warning: {w}", file=sys.stderr)
        if not args.check:
            print(f"{DATA_PATH} not written: fix the problems above first", file=sys.stderr)
            return 1
    text = dumps(data)
    if args.check:
        current = DATA_PATH.read_text(encoding="utf-8") if DATA_PATH.exists() else ""
        if current != text:
            print(f"{DATA_PATH} is not what the records give: run python -m tipsite.checker.shipdata",
                  file=sys.stderr)
            return 1
        return 0
    DATA_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {DATA_PATH.relative_to(settings.ROOT)}: {len(data['tips'])} tips")
    return 0


if __name__ == "__main__":
    sys.exit(main())
