"""Result sets: what one build measured, as one data file, and how builds are merged on the pages.

Every executed tip leaves a record beside its page (``docs/tips/<topic>/<tip>.result.json``,
written by :func:`conf.gallery.collect_result`): the tip's ``RESULT`` plus the provenance of the
run (torch version, device, device name, threads, Python, date).

``python -m conf.results export`` gathers one build's records into a *result set*,
``build/results/<device>-torch<version>.json`` (``-<n>threads`` is added when the build did not
use ``settings.TIPS_THREADS``). ``nox -s docs`` runs it after every build.

The docs build merges every result set it is given through the environment variable
``TIPS_RESULT_SETS``: paths separated by ``os.pathsep`` (``:`` on Linux), each a result-set file
or a folder whose ``*.json`` files are result sets. Each tip page then shows one column per
build configuration -- device, device name, torch version, threads -- with the figures of this
build first. A device the tip measures on but no result set covers is named on the page as
"not yet measured"; no number stands in for it.

``python -m conf.results rows FILE...`` prints the records as flat CSV rows
(tip, variant, metric, value, spread, unit, device, device_name, torch, threads, date).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from conf import settings, tipmeta

SCHEMA = "tips-result-set/1"
ENV_VAR = "TIPS_RESULT_SETS"
RESULT_SUFFIX = ".result.json"
# What a record carries besides the tip's RESULT (see conf.gallery.collect_result).
PROVENANCE_KEYS = ("tip", "topic", "torch", "python", "device", "device_name", "threads", "date")
ROW_KEYS = ("tip", "variant", "metric", "value", "spread", "unit",
            "device", "device_name", "torch", "threads", "date")
DEVICE_WORDS = {"cpu": "CPU", "cuda": "CUDA"}


class ResultSetError(ValueError):
    """A result set cannot be used; the message names the file and what is wrong."""


def device_word(device: str) -> str:
    return DEVICE_WORDS.get(device, device.upper())


def record_problems(record: Any) -> list[str]:
    """Problems with one record (a tip's RESULT plus provenance); empty when it is valid."""
    if not isinstance(record, dict):
        return [f"a record must be a dict, got {type(record).__name__}"]
    problems = [f"record misses {k!r}" for k in PROVENANCE_KEYS if k not in record]
    missing = tipmeta.RESULT_KEYS - record.keys()
    if missing:
        problems.append(f"record misses {sorted(missing)}")
    else:
        problems += tipmeta.validate_result({k: record[k] for k in tipmeta.RESULT_KEYS})
    return problems


def build_threads(record: dict) -> int:
    """The build's thread setting; a tip may have set another count for itself (``threads``)."""
    return int(record.get("build_threads", record["threads"]))


def column_key(record: dict) -> tuple[str, str, str, int]:
    """Records with the same key come from the same build configuration: one column on a page."""
    return (record["device"], record["device_name"], record["torch"], build_threads(record))


def column_label(record: dict) -> str:
    """``CPU · torch 2.13.0+cpu · 2 threads``: a column heading on a tip page."""
    threads = build_threads(record)
    return (f"{device_word(record['device'])} · torch {record['torch']} · "
            f"{threads} thread{'s' if threads != 1 else ''}")


# --- one build's records -> a result set --------------------------------------------------------

def tip_records(tips_out_dir: Path | None = None, tips: Iterable[str] | None = None,
                gallery_dir: Path | None = None) -> list[dict]:
    """The records in a build's output folder, for ``tips`` (default: every tip in the gallery).

    Records of tips that are no longer in the gallery are left out: they describe pages that
    the build no longer publishes.
    """
    tips_out_dir = Path(tips_out_dir or settings.TIPS_OUT_DIR)
    if tips is None:
        tips = [p.stem for p in tipmeta.tip_files(gallery_dir)]
    wanted = set(tips)
    records = []
    for path in sorted(tips_out_dir.glob(f"*/*{RESULT_SUFFIX}")):
        name = path.name[: -len(RESULT_SUFFIX)]
        if name not in wanted:
            continue
        record = json.loads(path.read_text(encoding="utf-8"))
        problems = record_problems(record)
        if problems:
            raise ResultSetError(f"{path}: " + "; ".join(problems))
        records.append(record)
    return records


def default_label(record: dict) -> str:
    label = f"{record['device']}-torch{record['torch']}"
    if build_threads(record) != settings.TIPS_THREADS:
        label += f"-{build_threads(record)}threads"
    return label


def make_set(records: list[dict]) -> dict:
    """One result set from records of one build configuration."""
    keys = {column_key(r) for r in records}
    if len(keys) != 1:
        raise ResultSetError(f"records from {len(keys)} build configurations cannot form one set: {sorted(keys)}")
    first = records[0]
    return {
        "schema": SCHEMA,
        "device": first["device"],
        "device_name": first["device_name"],
        "torch": first["torch"],
        "threads": build_threads(first),
        "records": sorted(records, key=lambda r: (r["topic"], r["tip"])),
    }


def export(out_dir: Path | None = None, tips_out_dir: Path | None = None,
           tips: Iterable[str] | None = None, suffix: str = "",
           gallery_dir: Path | None = None) -> list[Path]:
    """Write the build's records as result sets, one file per build configuration found.

    A build normally has one configuration. Cached pages executed by an earlier build under
    another torch release keep that release's records; they go to that release's file rather
    than being passed off as this build's.
    """
    out_dir = Path(out_dir or settings.RESULTS_DIR)
    records = tip_records(tips_out_dir, tips, gallery_dir)
    groups: dict[tuple, list[dict]] = {}
    for record in records:
        groups.setdefault(column_key(record), []).append(record)
    written = []
    out_dir.mkdir(parents=True, exist_ok=True)
    for group in groups.values():
        result_set = make_set(group)
        path = out_dir / f"{default_label(group[0])}{suffix}.json"
        path.write_text(json.dumps(result_set, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        written.append(path)
    return sorted(written)


# --- result sets given to a build -----------------------------------------------------------------

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
            raise ResultSetError(f"{ENV_VAR}: {part!r} is neither a result-set file nor a folder")
    return paths


def load_set(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ResultSetError(f"{path}: cannot be read as JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ResultSetError(f"{path}: not a result set (schema {SCHEMA!r} expected)")
    records = data.get("records")
    if not isinstance(records, list):
        raise ResultSetError(f"{path}: 'records' must be a list")
    for i, record in enumerate(records):
        problems = record_problems(record)
        if problems:
            raise ResultSetError(f"{path}: record {i}: " + "; ".join(problems))
    data["path"] = str(path)
    return data


def load_sets(paths: Iterable[Path]) -> list[dict]:
    return [load_set(p) for p in paths]


def fingerprint(paths: Iterable[Path]) -> str:
    """Changes whenever the given result sets change, so the pages showing them are rebuilt."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(str(Path(path).resolve()).encode())
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()


def _sort_key(record: dict) -> tuple:
    devices = list(tipmeta.vocab()["devices"])
    order = devices.index(record["device"]) if record["device"] in devices else len(devices)
    try:
        version = tipmeta.parse_version(record["torch"])
    except ValueError:
        version = ()
    return (order, version, record["torch"], build_threads(record), record["device_name"])


def columns_for(tip: str, current: dict | None, sets: Iterable[dict]) -> list[dict]:
    """The records a tip's page shows, one per build configuration, this build's first.

    ``current`` is the record this build wrote (its page shows that run's output). A given result
    set with the same configuration does not add a second column: the page's printed output
    and its figures stay from the same run. For every other configuration the most recent
    record wins.
    """
    best: dict[tuple, dict] = {}
    for result_set in sets:
        for record in result_set["records"]:
            if record["tip"] != tip:
                continue
            key = column_key(record)
            if key not in best or record["date"] > best[key]["date"]:
                best[key] = record
    columns = [current] if current is not None else []
    if current is not None:
        best.pop(column_key(current), None)
    return columns + sorted(best.values(), key=_sort_key)


def rows(records: Iterable[dict]) -> list[dict]:
    """Flat rows, one per measurement: the data behind the figures tables."""
    out = []
    for record in records:
        for m in record.get("measurements") or []:
            out.append({
                "tip": record["tip"], "variant": m["variant"], "metric": m["metric"],
                "value": m["value"], "spread": m.get("spread"), "unit": m["unit"],
                "device": record["device"], "device_name": record["device_name"],
                "torch": record["torch"], "threads": record["threads"], "date": record["date"],
            })
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conf.results", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    exp = sub.add_parser("export", help="write this build's records as result set(s)")
    exp.add_argument("--out", type=Path, default=settings.RESULTS_DIR, help="folder for the result sets")
    exp.add_argument("--tips-out", type=Path, default=settings.TIPS_OUT_DIR,
                     help="the build's executed-tips folder")
    exp.add_argument("--tips", help="comma-separated tip names (default: every tip in the gallery)")
    exp.add_argument("--suffix", default="", help="added to each file name, e.g. -shard1of2")
    rws = sub.add_parser("rows", help="print result sets as CSV rows, one per measurement")
    rws.add_argument("files", nargs="+", type=Path)
    dev = sub.add_parser("expect-device", help="fail unless every given result set is from DEVICE")
    dev.add_argument("device")
    dev.add_argument("paths", nargs="+", help="result-set files or folders")
    args = parser.parse_args(argv)
    try:
        if args.command == "export":
            tips = args.tips.split(",") if args.tips else None
            for path in export(args.out, args.tips_out, tips, args.suffix):
                print(f"result set: {path}")
        elif args.command == "expect-device":
            sets = load_sets(paths_from_env(os.pathsep.join(args.paths)))
            wrong = [f"{s['path']}: {s['device']}" for s in sets if s["device"] != args.device]
            if not sets or wrong:
                print(f"error: expected result sets from {args.device}, got: "
                      + ("; ".join(wrong) or "none"), file=sys.stderr)
                return 1
            print(f"{len(sets)} result set(s) from {args.device}: {', '.join(s['device_name'] for s in sets)}")
        else:
            writer = csv.DictWriter(sys.stdout, fieldnames=ROW_KEYS)
            writer.writeheader()
            for result_set in load_sets(args.files):
                writer.writerows(rows(result_set["records"]))
    except ResultSetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
