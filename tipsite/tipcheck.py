"""Check tips as a contributor would before a build: ``python -m tipsite.tipcheck TIP...``.

For each tip file it

1. reads and validates the metadata (:mod:`tipsite.tipmeta`);
2. checks that every helper the tip copies is identical to the reference (:mod:`tipsite.tipkit`);
3. runs the tip as a reader runs the download (a lone copy, plain python, ``--strict``
   deprecations) through the tip runner, with ``--fake-cuda`` under :mod:`tipsite.fakecuda`;
4. validates its ``RESULT``: the decisions re-derive, and the run decided every device it must
   (CUDA under ``--fake-cuda`` for a tip that measures CUDA);

and prints one line per tip: its verdicts, key figures, figure count and run time. Exit status 1
when any tip fails a check. Numbers from a ``--fake-cuda`` run are not measurements of anything.
"""

from __future__ import annotations

import argparse
import ast
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tipsite import records, tipkit, tipmeta

RUNNER = Path(__file__).with_name("tiprunner.py")
FAKE = Path(__file__).with_name("fakecuda.py")


def reference_helpers() -> dict[str, str]:
    """The source of each helper of :data:`tipkit.HELPERS`, as written in tipkit.py."""
    path = Path(tipkit.__file__)
    source = path.read_text(encoding="utf-8")
    funcs = {n.name: ast.get_source_segment(source, n) for n in ast.parse(source).body
             if isinstance(n, ast.FunctionDef)}
    return {name: funcs[name] for name in tipkit.HELPERS}


def copied_helpers(path: Path) -> dict[str, str]:
    """The top-level functions of a tip whose names are reference helpers, with their source."""
    source = path.read_text(encoding="utf-8")
    return {n.name: ast.get_source_segment(source, n) for n in ast.parse(source).body
            if isinstance(n, ast.FunctionDef) and n.name in tipkit.HELPERS}


def helper_problems(path: Path) -> list[str]:
    ref = reference_helpers()
    return [f"{name}: differs from the reference copy in tipsite/tipkit.py (copy it verbatim, or "
            f"give a function that behaves differently another name)"
            for name, text in copied_helpers(path).items() if text != ref[name]]


def sync_helpers(path: Path) -> list[str]:
    """Replace the tip's copies of reference helpers with the reference text; return their names."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines(keepends=True)
    ref = reference_helpers()
    nodes = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name in ref]
    changed = []
    for node in sorted(nodes, key=lambda n: n.lineno, reverse=True):
        if ast.get_source_segment(source, node) != ref[node.name]:
            lines[node.lineno - 1:node.end_lineno] = [ref[node.name] + "\n"]
            changed.append(node.name)
    if changed:
        path.write_text("".join(lines), encoding="utf-8")
    return sorted(changed)


def run_tip(path: Path, *, fake_cuda: bool = False, timeout: float = 900) -> dict:
    """Run a lone copy of the tip through the runner; return the runner's report."""
    from tipsite import compat

    with tempfile.TemporaryDirectory(prefix=f"{path.stem}-") as tmp:
        work = Path(tmp)
        shutil.copy(path, work / path.name)
        shutil.copy(RUNNER, work / RUNNER.name)
        shutil.copy(FAKE, work / FAKE.name)
        cmd = [sys.executable, RUNNER.name, "--strict", "--json", "report.json", path.name]
        if fake_cuda:
            cmd.insert(2, "--fake-cuda")
        proc = subprocess.run(cmd, cwd=work, env=compat.reader_env(), capture_output=True,
                              text=True, timeout=timeout)
        report_file = work / "report.json"
        report = (json.loads(report_file.read_text(encoding="utf-8")) if report_file.exists()
                  else {"status": "failed", "error": f"no report (exit {proc.returncode})"})
        report["stdout"], report["stderr"] = proc.stdout, proc.stderr
        return report


def check(path: Path, *, fake_cuda: bool = False, run: bool = True) -> tuple[list[str], dict | None]:
    """Every problem with one tip, and the runner's report (None when not run)."""
    try:
        tip = tipmeta.read_tip(path)
    except tipmeta.TipError as exc:
        return [str(exc)], None
    problems = helper_problems(path)
    if not run:
        return problems, None
    report = run_tip(path, fake_cuda=fake_cuda)
    if report.get("status") != "passed":
        problems.append(f"the tip failed: {report.get('error')}")
        return problems, report
    result = report.get("result")
    problems += records.result_problems(result)
    if not problems:
        problems += records.coverage_problems(result, tip.devices, cuda_available=fake_cuda or _cuda())
    if result.get("verdicts") and "Verdict on " not in report["stdout"]:
        problems.append("the tip printed no 'Verdict on <DEVICE>:' line (use report())")
    return problems, report


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


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
    parser.add_argument("--no-run", action="store_true", help="only metadata and helper copies")
    parser.add_argument("--sync", action="store_true",
                        help="first rewrite the tip's copies of the helpers from tipsite/tipkit.py")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each tip's output")
    args = parser.parse_args(argv)
    failed = 0
    for path in args.tips:
        if args.sync:
            changed = sync_helpers(path)
            if changed:
                print(f"synced {path.stem}: {', '.join(changed)}")
        problems, report = check(path, fake_cuda=args.fake_cuda, run=not args.no_run)
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
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
