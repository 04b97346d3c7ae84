"""Check tips as a contributor would before a build: ``python -m tipsite.tipcheck TIP...``.

For each tip file it

1. reads and validates the metadata (:mod:`tipsite.tipmeta`);
2. checks that it imports its helpers so that its download can carry them
   (:mod:`tipsite.tipsource`);
3. runs the tip's download as a reader runs it (a lone file, plain python, ``--strict``
   deprecations) through the tip runner, with ``--fake-cuda`` under :mod:`tipsite.fakecuda`;
4. validates its ``RESULT``: the decisions re-derive, and the run decided every device it must
   (CUDA under ``--fake-cuda`` for a tip that measures CUDA);

and prints one line per tip: its verdicts, key figures, figure count and run time. Exit status 1
when any tip fails a check. Numbers from a ``--fake-cuda`` run are not measurements of anything.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from conf import settings
from tipsite import devices, records, tipmeta, tipsource

RUNNER = Path(__file__).with_name("tiprunner.py")
FAKE = Path(__file__).with_name("fakecuda.py")


def run_tip(path: Path, *, fake_cuda: bool = False, timeout: float = 900, env: dict | None = None) -> dict:
    """Run a lone copy of the tip through the runner; return the runner's report."""
    return run_tips([path], fake_cuda=fake_cuda, timeout=timeout, env=env)[path.stem]


def run_tips(paths: list[Path], *, fake_cuda: bool = False, timeout: float = 1800,
             env: dict | None = None, per_tip: float | None = None) -> dict[str, dict]:
    """Run the downloads of several tips one after another in one runner process (Python and
    torch start once); returns each tip's report by name, with its own printed output. ``env``
    is added to a reader's environment (e.g. the fake device's ``TIPS_FAKECUDA_BLIND``).

    Each tip may run ``per_tip`` seconds (default: the build's limit, TIPS_TIMEOUT); a tip that
    will not stop is killed with the runner, reported failed, and the tips after it run in a
    new runner."""
    per_tip = per_tip or _tip_limit()
    found: dict[str, dict] = {}
    todo = list(paths)
    while todo:
        reports, proc = _run_runner(todo, fake_cuda, timeout, per_tip, env)
        found.update(reports)
        left = [p for p in todo if p.stem not in reports]
        if not left or proc is None:
            break
        hung = left[0]  # the runner runs them in order: it died on the first it did not report
        error = f"the runner stopped on it (exit {proc.returncode}): {proc.stderr[-1500:]}"
        if proc.returncode != -9:  # not the watchdog: the runner cannot run these at all
            found.update({p.stem: {"status": "failed", "error": error, "stdout": proc.stdout,
                                   "stderr": proc.stderr} for p in left})
            break
        found[hung.stem] = {"status": "failed", "error": error, "stdout": proc.stdout, "stderr": proc.stderr}
        todo = todo[todo.index(hung) + 1:]
    return found


def _tip_limit() -> float:
    import os

    text = os.environ.get("TIPS_TIMEOUT", "").strip()
    try:
        return float(text) if text else settings.TIPS_TIMEOUT_S
    except ValueError:
        return settings.TIPS_TIMEOUT_S


def _run_runner(paths: list[Path], fake_cuda: bool, timeout: float, per_tip: float,
                env: dict | None = None):
    """One runner process over ``paths``: the reports it wrote (all, or those before it was
    killed) and the finished process (None when the whole run passed ``timeout``)."""
    from tipsite import compat

    with tempfile.TemporaryDirectory(prefix="tips-") as tmp:
        work = Path(tmp)
        for path in paths:
            tipsource.write_download(path, work)
        shutil.copy(RUNNER, work / RUNNER.name)
        shutil.copy(FAKE, work / FAKE.name)
        cmd = [sys.executable, RUNNER.name, "--strict", *(["--fake-cuda"] if fake_cuda else []),
               "--timeout", str(per_tip), "--json", "reports.json", *(p.name for p in paths)]
        try:
            proc = subprocess.run(cmd, cwd=work, env={**compat.reader_env(), **(env or {})}, capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            error = f"the run of {len(paths)} tip(s) passed {timeout:g} s: {str(exc.stderr or '')[-2000:]}"
            return {p.stem: {"status": "failed", "error": error, "stdout": "", "stderr": ""}
                    for p in paths if p.stem}, None
        out = work / "reports.json"
        if not out.exists():
            if len(paths) > 1:
                return {}, proc
            error = f"no report (exit {proc.returncode}): {proc.stderr[-3000:]}"
            return {p.stem: {"status": "failed", "error": error, "stdout": proc.stdout, "stderr": proc.stderr}
                    for p in paths}, proc
        data = json.loads(out.read_text(encoding="utf-8"))
        reports = data["reports"] if "reports" in data else [data]
        found = {r["tip"]: r for r in reports}
        for r in found.values():
            r.setdefault("stdout", proc.stdout)
            r["stderr"] = proc.stderr
        return found, proc


def check(path: Path, *, fake_cuda: bool = False, run: bool = True) -> tuple[list[str], dict | None]:
    """Every problem with one tip, and the runner's report (None when not run)."""
    problems = static_problems(path)
    if problems or not run:
        return problems, None
    report = run_tip(path, fake_cuda=fake_cuda)
    return report_problems(path, report, fake_cuda=fake_cuda), report


def static_problems(path: Path) -> list[str]:
    """The tip's metadata and helper import, read without running it."""
    try:
        tipmeta.read_tip(path)
        tipsource.parse(path.read_text(encoding="utf-8"), path)
    except (tipmeta.TipError, tipsource.TipSourceError) as exc:
        return [str(exc)]
    return []


def report_problems(path: Path, report: dict, *, fake_cuda: bool = False) -> list[str]:
    """What is wrong with one run of the tip, from the runner's report."""
    tip = tipmeta.read_tip(path)
    problems: list[str] = []
    if report.get("status") != "passed":
        problems.append(f"the tip failed: {report.get('error')}")
        return problems
    result = report.get("result")
    problems += records.result_problems(result)
    if not problems:
        machine = devices.available() | ({"cuda"} if fake_cuda else set())
        problems += records.coverage_problems(result, tip.devices, machine)
    if result.get("verdicts") and "Verdict on " not in report["stdout"]:
        problems.append("the tip printed no 'Verdict on <DEVICE>:' line (use report())")
    return problems


def summary(report: dict) -> str:
    parts = []
    for device, v in (report.get("verdicts") or {}).items():
        key = v.get("key")
        figure = f" {key['value']:.3g}{key['unit']}" if isinstance(key, dict) else ""
        parts.append(f"{device}: {v['verdict']}{figure}")
    return (f"{', '.join(parts) or 'no verdict'}; {report.get('figures', 0)} figure(s); "
            f"{report.get('seconds', '?')} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tipsite.tipcheck", description=__doc__.split("\n\n")[0])
    parser.add_argument("tips", nargs="+", type=Path, help="tip files (gallery/<topic>/tip_x.py)")
    parser.add_argument("--fake-cuda", action="store_true", help="run the CUDA branch on a faked device")
    parser.add_argument("--no-run", action="store_true", help="only metadata and the helpers' import")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each tip's output")
    parser.add_argument("--rules", action="store_true",
                        help="add what each passing tip's version decides by to conf/tip-rules.json "
                             "(tipsite/records/rules.py)")
    args = parser.parse_args(argv)
    failed = 0
    manifest = records.rules.load() if args.rules else None
    for path in args.tips:
        problems, report = check(path, fake_cuda=args.fake_cuda, run=not args.no_run)
        if manifest is not None and report and not problems:
            added = records.rules.add(manifest, rule_record(path, report["result"]))
            print(f"rules: {', '.join(added) or 'nothing new'}")
        label = path.stem + (" (fake CUDA)" if args.fake_cuda else "")
        if report and args.verbose:
            print(report["stdout"])
        if problems:
            failed += 1
            print(f"FAIL {label}:\n  " + "\n  ".join(problems))
            if report and not args.verbose:
                print(report.get("stderr", "")[-3000:])
        else:
            print(f"ok   {label}: {summary(report) if report else 'not run'}")
    if manifest is not None:
        records.rules.write(manifest)
    return 1 if failed else 0


def rule_record(path: Path, result: dict) -> dict:
    """What the rule manifest needs of a run: the tip, its code's version, its RESULT."""
    return {"tip": path.stem, "code_sha256": records.tip_version(path)["code_sha256"], **result}


if __name__ == "__main__":
    sys.exit(main())
