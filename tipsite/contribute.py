"""Run tips on your own machine and write a result set the site can show: one command.

In a clone of this repository, with your own torch, numpy and matplotlib installed::

    python -m tipsite.contribute tip_inference_mode tip_channels_last    # or: all
    python -m tipsite.contribute all --out my-results.json

Each tip's download (the very file its page offers, helpers inlined) runs as a reader runs it, in
one process, under a reader's conditions (:mod:`tipsite.tiprunner`). Every tip that ran is
written as a record of this machine (its machine class: the CPU's model, instruction-set features
and cores, the GPU's name and compute capability), and all of them as one result set, by default
``docs/_data/results/contrib-<machine>-torch<version>-<date>.json``. Commit that file in a pull
request: CI vets it (``python -m tipsite.records vet FILE``: its schema, that each tip's source
matches a commit of this repository, its host fields, plausible values, no markup) and the next
build shows it as one more row of every tip's "Measured on" table. CONTRIBUTING.md has the steps.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from conf import settings
from tipsite import records, tipcheck, tipmeta, tipsource

PREFIX = "contrib-"  # a contributed result set's file name (nox -s vet finds them by it)


def tip_paths(names: list[str]) -> list[Path]:
    """Tip files by name (``tip_x``), path, or ``all``."""
    by_name = {p.stem: p for p in tipmeta.tip_files()}
    if names == ["all"]:
        return sorted(by_name.values())
    paths = []
    for name in names:
        path = Path(name)
        if path.suffix == ".py" and path.exists():
            paths.append(path)
        elif name in by_name:
            paths.append(by_name[name])
        else:
            raise SystemExit(f"error: no tip named {name!r} (tips: {', '.join(sorted(by_name))}, or all)")
    return paths


DEFECT = "a measurement defect, not an effect"  # tipkit.check_plausible's refusal


def retry_defects(paths: list[Path], reports: dict, run) -> tuple[dict, dict[str, list[str]]]:
    """Run once more, alone, each tip that refused its own measurement as a defect (a speed-up
    its cores cannot give: another process took them for a moment), and keep that second run,
    which must pass the same checks; the command says so (a record's warnings are what the run
    itself raised). A tip refused twice stays failed."""
    first = {p.stem: reports[p.stem]["error"].strip().splitlines()[-1][:300] for p in paths
             if (reports.get(p.stem) or {}).get("status") == "failed" and DEFECT in (reports[p.stem].get("error") or "")}
    if not first:
        return reports, {}
    print(f"running {len(first)} tip(s) again, alone: their measurement was refused as a defect "
          f"({', '.join(sorted(first))})", flush=True)
    second = run([p for p in paths if p.stem in first])
    out = {**reports, **{k: v for k, v in second.items() if k in first}}
    notes = {k: [f"ran twice: the first run refused its measurement ({why})"] for k, why in first.items()}
    return out, notes


def contribute(paths: list[Path], *, hosts: dict | None = None) -> tuple[dict, list[str]]:
    """Run the tips' downloads on this machine; return the result set and what failed.

    ``hosts`` describes the machine (default: this one, :func:`tipsite.devices.hosts`)."""
    # each tip gets the build's per-tip limit: `all` runs every tip in one process
    run = lambda some: tipcheck.run_tips(some, fake_cuda=False,  # noqa: E731
                                         timeout=settings.TIPS_TIMEOUT_S * max(len(some), 10))
    reports, again = retry_defects(paths, run(paths), run)
    for name, notes in sorted(again.items()):
        if (reports.get(name) or {}).get("status") == "passed":
            print(f"{name}: " + "; ".join(notes) + "; its second run is the one recorded", flush=True)
    made, failed = [], []
    with tempfile.TemporaryDirectory(prefix="tips-contribute-") as tmp:
        for path in paths:
            report = reports.get(path.stem) or {"status": "failed", "error": "no report"}
            problems = tipcheck.report_problems(path, report)
            if problems:
                failed.append(f"{path.stem}: " + "; ".join(problems)[:500])
                continue
            topic = Path(tmp) / path.parent.name
            topic.mkdir(exist_ok=True)
            download = tipsource.write_download(path, topic)  # the file that ran
            record = records.make_record(download, report["result"], build_threads=report["threads"])
            record["warnings"] = report.get("warnings", [])
            record["contributed"] = True
            if hosts is not None:
                record["hosts"] = hosts
            made.append(record)
    if not made:
        raise SystemExit("error: no tip ran to the end on this machine:\n" + "\n".join(failed))
    result_set = records.make_set(made)
    result_set["contributed"] = True
    return result_set, failed


def default_out(result_set: dict) -> Path:
    label = records.set_label(result_set["records"][0])
    day = result_set["records"][0]["date"][:10]
    return records.DATA_DIR / f"{PREFIX}{re.sub(r'[^A-Za-z0-9.+-]+', '-', label)}-{day}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tipsite.contribute", description=__doc__.split("\n\n")[0])
    parser.add_argument("tips", nargs="+", help="tip names (tip_x), tip files, or all")
    parser.add_argument("--out", type=Path, help="the result set to write (default: docs/_data/results/contrib-...)")
    args = parser.parse_args(argv)
    paths = tip_paths(args.tips)
    print(f"running {len(paths)} tip(s) as a reader would, one after another ...", flush=True)
    result_set, failed = contribute(paths)
    out = args.out or default_out(result_set)
    out.parent.mkdir(parents=True, exist_ok=True)
    records.write_record(out, result_set)
    problems = records.vet_set(out)
    for line in failed:
        print(f"not recorded: {line}", file=sys.stderr)
    if problems:
        print(f"error: {out} would be refused:\n" + "\n".join(problems), file=sys.stderr)
        return 1
    machine = "; ".join(f"{records.device_word(d)} {records.machine_class(result_set['records'][0], d)}"
                        for d in result_set["hosts"])
    print(f"wrote {out}: {len(result_set['records'])} tip(s) on {machine}, torch {result_set['torch']}")
    if out.resolve().is_relative_to(settings.ROOT.resolve()):
        print(f"next: git add {out.relative_to(settings.ROOT)} and open a pull request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
