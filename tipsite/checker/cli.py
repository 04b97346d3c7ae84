"""``python -m tipsite.checker PATH...`` (``nox -s check -- PATH...``): the command line.

One line per finding, ``path:line:col: CODE message -> verdict on DEVICE (torch), key figure,
link``, or ``--format json``; a summary on stderr. Exit status 1 when it found something, 2 when
a path could not be read or parsed and nothing was found, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import threading
import time
from pathlib import Path

from tipsite.checker import evidence
from tipsite.checker.registry import RULES

SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", "build", "dist", "venv", ".venv"}

_checker = None


def collect(paths: list[str]) -> tuple[list[Path], list[str]]:
    """The Python files named or found under the folders named (hidden folders skipped)."""
    files, errors = [], []
    for p in paths:
        path = Path(p)
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            for found in sorted(path.rglob("*.py")):
                rel = found.relative_to(path).parts[:-1]
                if not any(part.startswith(".") or part in SKIP_DIRS for part in rel):
                    files.append(found)
        else:
            errors.append(f"{p}: no such file or folder")
    return files, errors


def _init() -> None:
    global _checker
    from tipsite.checker.engine import Checker

    _checker = Checker()


def check_file(path: Path) -> tuple[list, str | None]:
    """(findings, error) for one file; runs in a worker process or in this one."""
    if _checker is None:
        _init()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [], f"{path}: cannot be read: {exc}"
    try:
        return _checker.check_source(text, str(path)), None
    except SyntaxError as exc:
        return [], f"{path}:{exc.lineno or 0}: cannot be parsed: {exc.msg}"


def can_fork() -> bool:
    """Worker processes are forked only from a process with one thread. A fork copies the
    memory but not the other threads, so a lock one of them held stays locked in the child
    for good: inside a pytest-xdist worker (whose execnet thread reads the controller's pipe)
    such a pool of workers once hung the test suite until CI killed it after 90 minutes."""
    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


def processes(n_files: int, jobs: int) -> int:
    """How many processes check ``n_files`` files when ``jobs`` are asked for."""
    return jobs if jobs > 1 and n_files >= 2 * jobs and can_fork() else 1


def check_files(files: list[Path], jobs: int) -> tuple[list, list[str]]:
    if processes(len(files), jobs) > 1:
        if _checker is None:
            _init()  # import libcst and TorchFix once, here: the forked workers inherit them
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            results = pool.map(check_file, files, chunksize=max(1, len(files) // (jobs * 4)))
    else:
        results = [check_file(f) for f in files]
    findings = [f for found, _ in results for f in found]
    errors = [e for _, e in results if e]
    return findings, errors


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def report(findings: list, ev: evidence.Evidence) -> list[dict]:
    rows = []
    for f in findings:
        rule = RULES[f.code]
        v = ev.verdict(rule.tip)
        rows.append({"path": f.path, "line": f.line, "col": f.col, "code": f.code, "torchfix": f.torchfix,
                     "finding": rule.finding, "message": evidence.message(rule, v, ev.target),
                     "tip": rule.tip, "tip_title": v.title, "device": v.device, "state": v.state,
                     "verdict": v.verdict, "key": v.key, "key_text": evidence.key_text(v.key),
                     "measured_torch": v.torch, "measured_on": v.host, "date": v.date,
                     "elsewhere": v.elsewhere, "link": v.link, "tail": evidence.tail(v)})
    return rows


def text_line(row: dict) -> str:
    code = row["code"] + (f" [TorchFix {row['torchfix']}]" if row["torchfix"] else "")
    return f"{row['path']}:{row['line']}:{row['col']}: {code} {row['message']} -> {row['tail']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tipsite.checker", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help="Python files or folders to check")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--torch", help="show the verdicts measured with this torch release (X.Y); "
                                        "default: the installed torch")
    parser.add_argument("--device", choices=("cpu", "cuda"), help="show the verdicts for this device; "
                                                                   "default: the best device present")
    parser.add_argument("--site-url", help="base URL of the published site for the links "
                                           "(default: $TIPS_SITE_URL, else the local build)")
    parser.add_argument("--jobs", type=int, default=default_jobs(), help="worker processes (default: cores)")
    parser.add_argument("--verbose", action="store_true", help="list the result data that was ignored")
    parser.add_argument("--list-rules", action="store_true", help="print every rule and its tip, then exit")
    parser.add_argument("--bench", type=int, nargs="?", const=200, metavar="N",
                        help="benchmark: check N generated files of 200 lines (default 200), report files/s")
    args = parser.parse_args(argv)

    if args.list_rules:
        for rule in RULES.values():
            via = f" (TorchFix {rule.torchfix})" if rule.torchfix else ""
            print(f"{rule.code}{via} {rule.title} -> {rule.tip}")
        return 0
    if args.bench:
        from tipsite.checker import bench

        result = bench.run(args.bench, jobs=args.jobs)
        print(json.dumps(result) if args.format == "json" else bench.describe(result))
        return 0
    if not args.paths:
        parser.error("name at least one file or folder")

    start = time.perf_counter()
    files, errors = collect(args.paths)
    findings, parse_errors = check_files(files, args.jobs)
    errors += parse_errors
    findings.sort(key=lambda f: (f.path, f.line, f.col, f.code))
    target = evidence.detect_target(args.torch, args.device)
    ev = evidence.Evidence(target, site_url=args.site_url)
    rows = report(findings, ev)
    seconds = time.perf_counter() - start

    if args.format == "json":
        json.dump({"target": {"torch": target.torch, "device": target.device, "torch_from": target.torch_from,
                              "device_from": target.device_from},
                   "files": len(files), "findings": rows, "errors": errors}, sys.stdout, indent=1)
        print()
    else:
        for row in rows:
            print(text_line(row))
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    flagged = len({r["path"] for r in rows})
    print(f"{len(rows)} finding(s) in {flagged} of {len(files)} file(s), {seconds:.2f} s; "
          f"verdicts for {target.describe()}", file=sys.stderr)
    if ev.warnings:
        if args.verbose:
            for w in dict.fromkeys(ev.warnings):
                print(f"note: {w}", file=sys.stderr)
        else:
            print(f"note: {len(set(ev.warnings))} result record(s) or set(s) could not be used "
                  "(--verbose lists them)", file=sys.stderr)
    if rows:
        return 1
    return 2 if errors else 0
