"""The torch-version compatibility matrix: run it on one release, and read what it recorded.

``nox -s "matrix(torch='2.9.1')"`` installs that release in its own reused virtualenv and runs
``python -m tipsite.compat run 2.9.1`` there, which

1. runs the doctests (``tests/test_doctests.py``: the README's and the reference pages'
   ``>>>`` examples) with that torch;
2. runs every tip as a reader would: a lone copy of the file in a temporary folder, plain
   python, no project code importable, through :mod:`tipsite.tiprunner`, which records the
   verdict and key figure from the tip's ``RESULT`` and every warning the tip let through.
   A tip whose ``sphinx_gallery_tips_min_torch`` is newer than the release is recorded as
   "not applicable" and not run. On the newest release of ``settings.TORCH_MATRIX`` a
   deprecation warning raised by the tip's code (or by torch on its behalf) fails the tip;
3. writes ``docs/_data/compat/torch-<release>.json`` (committed; the docs build reads it): each
   tip's status, warnings and version; and every tip that ran to its verdict as an ordinary
   record of this machine, all in one ordinary result set, ``records-torch-<release>.json``
   beside it, vetted as every set is (``python -m tipsite.records vet``): the verdicts the
   pages show for a release are re-derived from that set's samples on every read
   (:func:`read`), by the path that checks every record.

``python -m tipsite.compat run 2.9.1 tip_a tip_b`` re-runs only those tips and keeps the other
entries of the existing file (each entry carries its own date); ``run 2.9.1 --changed`` re-runs
the doctests and only the tips that are new, edited since their recorded run (each entry keeps
the version digests of the tip it ran, :mod:`tipsite.tipsource`) or failed. The page marks an
entry that measured another version of the tip's code or deciding helpers as stale.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from conf import settings
from tipsite import devices, records, tipmeta

DATA_DIR = settings.DOCS_DIR / "_data" / "compat"
RUNNER = Path(__file__).with_name("tiprunner.py")
DOCTESTS = settings.ROOT / "tests" / "test_doctests.py"
TIP_TIMEOUT_S = 600

PASSED, FAILED, NOT_APPLICABLE = "passed", "failed", "not applicable"


def data_path(release: str) -> Path:
    return DATA_DIR / f"torch-{release}.json"


def set_path(run_path: Path) -> Path:
    """The ordinary result set of a matrix run: ``records-torch-<release>.json`` beside it."""
    return run_path.with_name(f"records-{run_path.name}")


def load(release: str) -> dict[str, Any] | None:
    """The recorded run for one release, or None when it never ran (shown as missing)."""
    path = data_path(release)
    return read(path) if path.exists() else None


def read(path: Path) -> dict[str, Any]:
    """A matrix run, checked as records are (:func:`tipsite.records.compat_run_problems`; a bad
    file raises, naming it), with each tip's verdicts and key figures taken from its record in
    the run's result set (:func:`set_path`), which loads as every set does: samples checked and
    every decision re-derived from them. ``"records"`` maps a tip to that record. A run written
    before the matrix wrote result sets keeps the verdicts its file holds (no samples: they
    cannot be re-derived, and every one of them measured an older version of the helpers)."""
    try:
        run = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise records.RecordError(f"{path}: cannot be read as JSON: {exc}") from None
    problems = records.compat_run_problems(run)
    if problems:
        raise records.RecordError(f"{path}: " + "; ".join(problems[:10]))
    run["records"] = {}
    if set_path(path).exists():
        result_set = records.load_set(set_path(path))
        run["records"] = {r["tip"]: r for r in result_set["records"]}
        for name, entry in run["tips"].items():
            record = run["records"].get(name)
            mine = record is not None and all(record.get(k) == entry.get(k) for k in records.VERSION_KEYS)
            # the file's own verdicts never count once the run has a set: only a record's do
            entry["verdicts"] = shown_verdicts(record) if mine else {}
    return run


def shown_verdicts(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What a matrix entry shows of its record: per device, the verdict and the key figure."""
    return {d: {"verdict": v["verdict"], "key": v.get("key")} for d, v in record["verdicts"].items()}


def machine_class(run: dict[str, Any] | None) -> str:
    """The machine class a release's run measured on: from its ``hosts`` (runs since the matrix
    recorded them); older runs named only the device, so theirs is unknown."""
    if not run or "hosts" not in run:
        return devices.UNKNOWN_CLASS
    return records.machine_class(run, run.get("device") or devices.primary(run["hosts"]))


def load_all() -> dict[str, dict[str, Any] | None]:
    return {release: load(release) for release in settings.TORCH_MATRIX}


def source_hash(path: Path) -> str:
    """The SHA-256 of the file a reader runs: the tip's download (its helpers inlined)."""
    from tipsite import tipsource

    return hashlib.sha256(tipsource.inline(path.read_text(encoding="utf-8"), path).encode("utf-8")).hexdigest()


def is_current(entry: dict[str, Any] | None, version: dict[str, str] | None) -> bool:
    """Whether a matrix entry ran this version of the tip (:func:`tipsite.records.is_current`)."""
    return bool(entry and version and records.is_current(entry, version))


def full_run(run: dict[str, Any]) -> dict[str, Any] | None:
    """Date, duration and size of the last run of every tip on a release (None if none)."""
    if run.get("full_run"):
        return run["full_run"]
    if "partial" not in run and "seconds" in run:  # written before runs could be partial
        return {"date": run["date"], "seconds": run["seconds"], "tips": len(run["tips"])}
    return None


def applies(tip: tipmeta.Tip, release: str) -> bool:
    return tipmeta.parse_version(tip.min_torch) <= tipmeta.parse_version(release)


def now_utc() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def reader_env() -> dict[str, str]:
    """The environment a reader's shell would give the tip: no project paths, no build knobs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TIPS_"))}
    env["MPLBACKEND"] = "Agg"
    return env


def run_tip(path: Path, *, strict: bool, python: str = sys.executable,
            timeout: float = TIP_TIMEOUT_S, threads: int | None = None) -> dict[str, Any]:
    """Run the tip's download through the runner in a fresh folder; return the runner's report,
    with the run as a record (``"record"``) when it decided: ``threads`` is the run's own
    setting (a tip may change its threads for a measurement; the run's is one for all)."""
    from tipsite import tipsource

    with tempfile.TemporaryDirectory(prefix=f"{path.stem}-") as tmp:
        work = Path(tmp) / path.parent.name  # the topic: a record names it from the folder
        work.mkdir()
        download = tipsource.write_download(path, work)
        shutil.copy(RUNNER, work / RUNNER.name)
        cmd = [python, RUNNER.name, "--json", "report.json", *(["--strict"] if strict else []), path.name]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=work, env=reader_env(), capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"status": FAILED, "error": f"timed out after {timeout:.0f} s", "verdicts": {},
                    "warnings": [], "seconds": round(time.perf_counter() - start, 2)}
        report_file = work / "report.json"
        if report_file.exists():
            report = json.loads(report_file.read_text(encoding="utf-8"))
        else:
            report = {"status": FAILED, "verdicts": {}, "warnings": [],
                      "error": f"the runner wrote no report (exit {proc.returncode}):\n{proc.stderr[-2000:]}"}
        if proc.returncode != 0 and report.get("status") == PASSED:
            report["status"] = FAILED
            report["error"] = f"exit status {proc.returncode}:\n{proc.stderr[-2000:]}"
        if report.get("status") == PASSED and report.get("verdicts") and "Verdict on " not in proc.stdout:
            report["status"] = FAILED
            report["error"] = "the tip printed no 'Verdict on <DEVICE>: ' line"
        report["wall_seconds"] = round(time.perf_counter() - start, 2)
        if report.get("status") == PASSED and isinstance(report.get("result"), dict) \
                and report["result"].get("verdicts"):
            # the run as an ordinary record of this machine: the file that ran, its RESULT
            report["record"] = records.make_record(download, report["result"],
                                                   build_threads=threads or report["threads"])
            report["record"]["warnings"] = report.get("warnings", [])
        return report


def run_doctests(python: str = sys.executable) -> dict[str, Any]:
    """Run the doctest suite with this venv's torch; return status and counts."""
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(DOCTESTS.relative_to(settings.ROOT))]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=settings.ROOT, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|error|errors)", out)}
    return {
        "status": PASSED if proc.returncode == 0 else FAILED,
        "passed": counts.get("passed", 0),
        "failed": counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0),
        "seconds": round(time.perf_counter() - start, 2),
        "output_tail": None if proc.returncode == 0 else out[-3000:],
    }


def _tip_entry(tip: tipmeta.Tip, report: dict[str, Any], date: str, run_date: str) -> dict[str, Any]:
    entry = {
        "run": run_date,  # the run (full or partial) that produced this entry
        "topic": tip.topic,
        "min_torch": tip.min_torch,
        "status": report["status"],
        # the verdicts are the record's, in the run's result set (read() fills them in)
        "verdicts": {},
        "warnings": report.get("warnings", []),
        "deprecations": sum(1 for w in report.get("warnings", [])
                            if w.get("deprecation") and w.get("origin") == "tip"),
        "skipped": (report.get("result") or {}).get("skipped", []),
        "seconds": report.get("seconds"),
        "device": report.get("device"),
        "date": date,
        "error": report.get("error"),
        "sha256": source_hash(tip.path),
        **records.tip_version(tip.path),
    }
    return entry


def run(release: str, only: list[str] | None = None) -> int:
    import torch

    only = list(only or [])
    changed = "--changed" in only
    if changed:
        only.remove("--changed")

    built = torch.__version__
    if built.split("+", 1)[0] != release:
        print(f"this venv has torch {built}, not {release}", file=sys.stderr)
        return 2
    strict = release == settings.TORCH_MATRIX[-1]
    tips = tipmeta.read_all()
    if only:
        unknown = set(only) - {t.name for t in tips}
        if unknown:
            print(f"unknown tips: {sorted(unknown)}", file=sys.stderr)
            return 2
    start = time.perf_counter()
    previous = load(release) if (only or changed) else None
    if changed:
        old = (previous or {}).get("tips", {})
        only = [t.name for t in tips if (t.name not in old or old[t.name].get("status") == FAILED
                                         or not is_current(old[t.name], records.tip_version(t.path)))]
        print(f"[matrix {release}] --changed: re-running {len(only)} tip(s): {' '.join(only) or '(none)'}")
    hosts = devices.hosts()  # the machine, as a build's records describe it (tipsite/devices.py)
    device = devices.primary(hosts)
    data: dict[str, Any] = {
        "torch": release,
        "torch_build": built,
        "python": platform.python_version(),
        "device": device,
        "device_name": hosts[device]["name"],
        "hosts": hosts,
        "cuda_in_build": torch.version.cuda,
        "threads": torch.get_num_threads(),
        "strict_deprecations": strict,
        "date": now_utc(),
        "doctests": None,
        "tips": dict(previous["tips"]) if previous else {},
    }
    partial = bool(only or changed)
    # this run's records, and on a partial run those of the tips it does not re-run
    data["records"] = dict(previous.get("records") or {}) if previous else {}
    if previous:
        data["doctests"] = previous.get("doctests")
        if partial and full_run(previous):
            data["full_run"] = full_run(previous)
    data["partial"] = sorted(only) if partial else None
    if not only or changed:
        print(f"[matrix {release}] doctests ...", flush=True)
        data["doctests"] = run_doctests()
        print(f"[matrix {release}] doctests: {data['doctests']['status']} "
              f"({data['doctests']['passed']} passed, {data['doctests']['failed']} failed)", flush=True)
        if data["doctests"]["output_tail"]:
            print(data["doctests"]["output_tail"], flush=True)
    for tip in tips:
        if (only or changed) and tip.name not in only:
            continue
        if not applies(tip, release):
            data["tips"][tip.name] = {"topic": tip.topic, "min_torch": tip.min_torch,
                                      "status": NOT_APPLICABLE, "date": data["date"], "run": data["date"],
                                      "sha256": source_hash(tip.path), **records.tip_version(tip.path)}
            data["records"].pop(tip.name, None)
            print(f"[matrix {release}] {tip.name}: not applicable (needs torch >= {tip.min_torch})")
            continue
        report = run_tip(tip.path, strict=strict, threads=data["threads"])
        entry = _tip_entry(tip, report, now_utc(), data["date"])
        data["tips"][tip.name] = entry
        data["records"].pop(tip.name, None)
        if report.get("record"):
            data["records"][tip.name] = report["record"]
            entry["verdicts"] = shown_verdicts(report["record"])
        said = "; ".join(f"{d} {v.get('verdict')}" + (
            f" ({v['key']['name']} = {v['key']['value']:.3g} {v['key']['unit']})"
            if isinstance(v.get("key"), dict) else "") for d, v in entry["verdicts"].items())
        print(f"[matrix {release}] {tip.name}: {entry['status']}, verdicts: {said or 'none'}, "
              f"{len(entry['warnings'])} warning(s), {entry['deprecations']} deprecation(s), "
              f"{entry['seconds']} s", flush=True)
        if entry["status"] == FAILED:
            print(entry["error"], flush=True)
        _write(release, data, start, names={t.name for t in tips})  # a killed run keeps what it ran
    if not partial:
        data["full_run"] = {"date": data["date"], "seconds": round(time.perf_counter() - start, 1),
                            "tips": len(data["tips"])}
    _write(release, data, start, names={t.name for t in tips})
    failed = [k for k, v in data["tips"].items() if v["status"] == FAILED]
    doc_failed = (data["doctests"] or {}).get("status") == FAILED
    vetted = set_path(data_path(release))
    refused = records.vet_set(vetted) if data["records"] else []
    for line in refused:
        print(f"[matrix {release}] refused: {line}", flush=True)
    print(f"[matrix {release}] wrote {data_path(release).relative_to(settings.ROOT)}: "
          f"{sum(v['status'] == PASSED for v in data['tips'].values())} passed, {len(failed)} failed, "
          f"{sum(v['status'] == NOT_APPLICABLE for v in data['tips'].values())} not applicable; "
          f"doctests {(data['doctests'] or {}).get('status')}; {data['seconds']} s; "
          f"{len(data['records'])} record(s) in {vetted.name}, "
          f"{'refused by vetting' if refused else 'vetted'}")
    return 1 if failed or doc_failed or refused else 0


def _write(release: str, data: dict[str, Any], start: float, names: set[str]) -> None:
    """The run's file and its result set (the records' verdicts are written once: in the set)."""
    # tips that no longer exist must not linger in the data
    data["tips"] = {k: v for k, v in sorted(data["tips"].items()) if k in names}
    made = [r for k, r in sorted(data["records"].items()) if k in names]
    data["seconds"] = round(time.perf_counter() - start, 1)
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    if made:
        records.write_record(set_path(data_path(release)), records.make_set(made))
    on_disk = {k: {**v, "verdicts": {}} if k in data["records"] else v for k, v in data["tips"].items()}
    tmp = data_path(release).with_suffix(".tmp")
    body = {k: v for k, v in data.items() if k != "records"}
    tmp.write_text(json.dumps({**body, "tips": on_disk}, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(data_path(release))


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "run" or argv[1] not in settings.TORCH_MATRIX:
        print(f"usage: python -m tipsite.compat run <{'|'.join(settings.TORCH_MATRIX)}> [tip_name ...]",
              file=sys.stderr)
        return 2
    return run(argv[1], argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
