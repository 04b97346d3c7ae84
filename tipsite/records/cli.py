"""The command line: ``python -m tipsite.records export|rows|vet|expect-device|upgrade|upgrade-v2``."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterable
from pathlib import Path

from conf import settings
from tipsite.records import rules
from tipsite.records.check import V2_SET_SCHEMA, RecordError
from tipsite.records.legacy import upgrade_v1, upgrade_v2
from tipsite.records.store import export, load_set, load_sets, write_record
from tipsite.records.versions import history_versions
from tipsite.records.vet import expect_device, vet_set

DESCRIPTION = "Result records and result sets: the one owner of what a build measured."

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
    parser = argparse.ArgumentParser(prog="python -m tipsite.records", description=DESCRIPTION)
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
    rls = sub.add_parser("rules", help="add what each tip version decides by, from result sets of the "
                                       "project's own builds, to conf/tip-rules.json (tipsite/records/rules.py)")
    rls.add_argument("files", nargs="+", type=Path)
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
        if args.command == "rules":
            manifest = rules.load()
            for path in args.files:
                for record in load_set(path)["records"]:
                    added = rules.add(manifest, record)
                    if added:
                        print(f"rules: {', '.join(added)}")
            rules.write(manifest)
            return 0
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
