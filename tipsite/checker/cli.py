"""``torch-tips PATH...`` (``python -m tipsite.checker``, ``nox -s check -- PATH...``): the command line.

One short line per finding, ``path:line:col: CODE message link``. A finding whose tip **holds**
for your device and torch fails the run (exit 1); the others are notes (``--fail-on`` changes
that). ``--explain CODE`` prints a rule and its evidence; ``--verbose`` adds the evidence under
each finding; ``--format json`` or ``github`` (workflow annotations). Exit status 2 when a path
could not be read or parsed and nothing failed, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

from tipsite.checker import config as configuration
from tipsite.checker import evidence, runner
from tipsite.checker.registry import RULES, is_stable


def report(findings: list, ev: evidence.Evidence, fail_on: str) -> list[dict]:
    rows = []
    for f in findings:
        rule = RULES[f.code]
        v = ev.verdict(rule.tip)
        fails = evidence.fails(v, fail_on)
        rows.append({"path": f.path, "line": f.line, "col": f.col, "code": f.code, "torchfix": f.torchfix,
                     "preview": not is_stable(f.code), "fix": rule.fix,
                     "severity": "error" if fails else "note", "advice": v.holds,
                     "message": evidence.short(rule, v, ev.word), "long": evidence.message(rule, v, ev.word),
                     "tip": rule.tip, "tip_title": v.title, "device": v.device, "state": v.state,
                     "verdict": v.verdict, "key": v.key, "key_text": evidence.key_text(v.key),
                     "measured_torch": v.torch, "measured_on": v.host, "date": v.date,
                     "elsewhere": v.elsewhere, "link": v.link, "evidence": evidence.tail(v, ev.word)})
    return rows


def text_line(row: dict) -> str:
    link = f" {row['link']}" if row["link"] else ""
    note = "" if row["advice"] else "note: "  # the evidence gives no advice (whatever --fail-on says)
    preview = "[preview] " if row["preview"] else ""
    return f"{row['path']}:{row['line']}:{row['col']}: {row['code']} {preview}{note}{row['message']}{link}"


def _escape(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def github_line(row: dict) -> str:
    """A GitHub Actions workflow command: an annotation on the file's line."""
    level = "error" if row["severity"] == "error" else "notice"
    props = ",".join(f"{k}={_escape(str(v), prop=True)}" for k, v in
                     (("file", row["path"]), ("line", row["line"]), ("col", row["col"]),
                      ("title", f"{row['code']} ({row['tip']})")))
    link = f" {row['link']}" if row["link"] else ""
    return f"::{level} {props}::{_escape(row['message'] + link)}"


PREVIEW_NOTE = " (preview: runs with --preview, or selected by its code)"


def explain(code: str, ev: evidence.Evidence) -> str:
    rule = RULES[code]
    tip = ev.data["tips"].get(rule.tip)
    lines = [f"{rule.code}: {rule.title}" + ("" if is_stable(code) else PREVIEW_NOTE), "",
             f"What the code does: {rule.finding}.", f"The tip's advice: {rule.advice}."]
    if rule.scope:
        lines.append(f"Not flagged: {rule.scope}")
    if rule.torchfix:
        lines.append(f"Found by TorchFix's {rule.torchfix}, narrowed as above.")
    lines += ["", f"Evidence: {rule.tip}" + (f', "{tip["title"]}"' if tip else " (not in the shipped evidence)")]
    if tip:
        for device, states in sorted(tip["states"].items()):
            for rel, state in sorted(states.items()):
                if rel == evidence.ANY:
                    continue
                v = ev.state_verdict(rule.tip, device, state)
                lines.append(f"  {ev.word(device)}, torch {rel}: {evidence.tail(v, ev.word)}")
        if not tip["states"]:
            lines.append("  not measured on any device yet")
        v = ev.verdict(rule.tip)
        lines.append(f"For {ev.target.describe(ev.words)}: {evidence.tail(v, ev.word)}"
                     + (" -> findings fail the run" if v.holds else " -> findings are notes"))
    link = ev.link(rule.tip)
    if link:
        lines.append(f"Page: {link}")
    lines += ["", "Flagged:", *("    " + x for x in rule.example.rstrip().splitlines()),
              "Recommended:", *("    " + x for x in rule.clean.rstrip().splitlines())]
    return "\n".join(lines)


def _codes(value: str | None, parser: argparse.ArgumentParser, flag: str) -> list[str] | None:
    if value is None:
        return None
    try:
        return configuration.check_prefixes(value.split(","), flag)
    except configuration.ConfigError as exc:
        parser.error(str(exc))


IN_REPOSITORY = (Path(__file__).resolve().parents[2] / "gallery").is_dir()


def version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version

        return dist_version("torch-tips")
    except (ImportError, PackageNotFoundError):
        return "(from the source tree)"


def _release_ok(value: str) -> bool:
    return value == "any" or bool(re.fullmatch(r"\d+\.\d+(\.\d+)?", value.strip()))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="torch-tips", description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="*", help="Python files or folders to check")
    p.add_argument("--format", choices=("text", "json", "github"), default="text")
    p.add_argument("--select", help="comma-separated code prefixes to run (replaces the default rules)")
    p.add_argument("--extend-select", help="comma-separated codes added to the selection")
    p.add_argument("--ignore", help="comma-separated code prefixes never reported")
    p.add_argument("--preview", action="store_true",
                   help="run the preview rules too (rules not yet shown precise on held-out code)")
    p.add_argument("--fail-on", choices=evidence.FAIL_ON,
                   help="which findings fail the run: those whose tip holds for your device and torch "
                        "(default), any finding, or none")
    p.add_argument("--torch", help="judge with the verdicts measured with this torch release (X.Y, or 'any'); "
                                   "default: the installed torch")
    p.add_argument("--device", choices=("cpu", "cuda"), help="judge for this device; default: the best present")
    p.add_argument("--config", type=Path, help="a pyproject.toml with a [tool.torch-tips] section "
                                               "(default: the closest one with that section)")
    p.add_argument("--site-url", help="base URL of the published site, for the links")
    p.add_argument("--explain", metavar="CODE", help="print a rule, what it leaves alone and its evidence")
    p.add_argument("-v", "--verbose", action="store_true", help="the evidence under each finding")
    p.add_argument("--hide-notes", action="store_true", help="print only the findings that fail the run")
    p.add_argument("--list-rules", action="store_true", help="print every rule and its tip, then exit")
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    in_repo = IN_REPOSITORY  # maintainer tools: shown only in a clone of the project's repository
    p.add_argument("--records", action="store_true",
                   help="in the project's repository: read the result records (this build, committed sets, "
                        "$TIPS_RESULT_SETS) instead of the evidence shipped with the checker"
                   if in_repo else argparse.SUPPRESS)
    p.add_argument("--jobs", type=int, default=runner.default_jobs(), help="worker processes (default: cores)")
    p.add_argument("--bench", type=int, nargs="?", const=200, metavar="N",
                   help="in the project's repository: check N files of 200 lines cut from the tips, report speed"
                   if in_repo else argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # the reader closed the pipe (``| head``): stop quietly, as other command-line tools do;
        # stdout goes to /dev/null so that Python's flush at exit does not raise again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)

    if args.list_rules:
        for rule in RULES.values():
            via = f" (TorchFix {rule.torchfix})" if rule.torchfix else ""
            off = "" if is_stable(rule.code) else " [preview]"
            print(f"{rule.code}{via} {rule.title}{off} -> {rule.tip}")
        return 0
    if args.bench:
        try:
            from tipsite.checker import bench

            texts = bench.corpus(args.bench)
        except ImportError:
            ap.error("--bench runs in a clone of the project's repository (it cuts its files from the tips)")
        result = bench.run(args.bench, jobs=args.jobs, texts=texts)
        print(json.dumps(result) if args.format == "json" else bench.describe(result))
        return 0
    overrides = {attr: _codes(getattr(args, attr), ap, flag) for flag, attr in
                 (("--select", "select"), ("--extend-select", "extend_select"), ("--ignore", "ignore"))}

    def settle(cfg: configuration.Config) -> configuration.Config:
        for attr, codes in overrides.items():
            if codes is not None:
                setattr(cfg, attr, codes if attr != "extend_select" else cfg.extend_select + codes)
        if args.preview:
            cfg.preview = True
        return cfg

    configs: dict[Path | None, configuration.Config] = {}
    groups: dict[Path | None, list[str]] = {}
    try:
        if args.config is not None:
            configs[args.config] = configuration.load(args.config)
            groups[args.config] = list(args.paths)
        else:
            for p in args.paths or ["."]:
                found = configuration.find_pyproject(Path(p).resolve())
                if found not in configs:
                    configs[found] = configuration.load(found) if found else configuration.Config()
                groups.setdefault(found, []).append(p)
    except configuration.ConfigError as exc:
        ap.error(str(exc))
    for c in configs.values():
        settle(c)
    cfg = next(iter(configs.values()))  # the first path's: the run's fail-on, torch, device, site-url
    if args.torch is not None and not _release_ok(args.torch):
        ap.error(f"--torch: {args.torch!r} is not a torch release like 2.13 (or 'any')")
    if cfg.torch is not None and not _release_ok(cfg.torch):
        ap.error(f"{cfg.path} [tool.torch-tips]: torch = {cfg.torch!r} is not a torch release like 2.13 (or 'any')")
    fail_on = args.fail_on or cfg.fail_on or "holds"
    target = evidence.detect_target(args.torch or cfg.torch, args.device or cfg.device,
                                    torch_from="--torch" if args.torch else f"{cfg.path}",
                                    device_from="--device" if args.device else f"{cfg.path}")
    data = None
    if args.records:
        try:
            from tipsite.checker import shipdata
        except ImportError:
            ap.error("--records runs in a clone of the project's repository (it reads its result records)")
        data = shipdata.live()
    ev = evidence.Evidence(target, data, site_url=args.site_url or cfg.site_url)
    if args.explain:
        code = args.explain.strip().upper()
        if code not in RULES:
            ap.error(f"--explain: no rule {code!r} (see --list-rules)")
        print(explain(code, ev))
        return 0
    if not args.paths:
        ap.error("name at least one file or folder")

    start = time.perf_counter()
    files, errors, kept = [], [], []
    for key, paths in groups.items():
        c = configs[key]
        found_files, found_errors = runner.collect(paths, skip=c.excluded if c.exclude else None)
        files += found_files
        errors += found_errors
        findings, parse_errors = runner.check_files(found_files, args.jobs, target.release, target.device,
                                                    c.codes())
        errors += parse_errors
        ignored: dict[str, set[str]] = {}
        for f in findings:
            if c.per_file_ignores:
                prefixes = ignored.get(f.path)
                if prefixes is None:  # once per file, not per finding
                    prefixes = ignored[f.path] = c.ignored_in(Path(f.path))
                if any(f.code.startswith(p) for p in prefixes):
                    continue
            kept.append(f)
    kept.sort(key=lambda f: (f.path, f.line, f.col, f.code))
    rows = report(kept, ev, fail_on)
    seconds = time.perf_counter() - start
    failing = [r for r in rows if r["severity"] == "error"]
    shown = failing if args.hide_notes else rows

    if args.format == "json":
        json.dump({"target": {"torch": target.torch, "device": target.device, "torch_from": target.torch_from,
                              "device_from": target.device_from},
                   "fail_on": fail_on, "config": str(cfg.path) if cfg.path else None,
                   "files": len(files), "findings": shown, "errors": errors}, sys.stdout, indent=1)
        print()
    else:
        for row in shown:
            print(github_line(row) if args.format == "github" else text_line(row))
            if args.verbose and args.format == "text":
                print(f"    {row['long']}")
                print(f"    evidence: {row['evidence']}")
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    flagged = len({r["path"] for r in rows})
    notes = len(rows) - len(failing)
    print(f"{len(failing)} failing finding(s) and {notes} note(s) in {flagged} of {len(files)} file(s), "
          f"{seconds:.2f} s; verdicts for {target.describe(ev.words)}; failing: "
          + {"holds": "findings whose tip holds there", "any": "every finding",
             "never": "none"}[fail_on] + " (--fail-on)", file=sys.stderr)
    if not any(configs[key].codes() for key in groups):
        print("note: no rule ran: none is stable now (each was under 90% useful, or wrong, on labelled "
              "code it was not tuned on: docs/reference/checker.rst) and none was selected by code; "
              "--preview runs them all", file=sys.stderr)
    if rows and not ev.site_url:
        print("note: no site URL for the links: --site-url, TIPS_SITE_URL or site-url in the configuration; "
              "--explain CODE prints the evidence", file=sys.stderr)
    if ev.warnings:
        if args.verbose:
            for w in dict.fromkeys(ev.warnings):
                print(f"note: {w}", file=sys.stderr)
        else:
            print(f"note: {len(set(ev.warnings))} result record(s) or set(s) could not be used "
                  "(--verbose lists them)", file=sys.stderr)
    if failing:
        return 1
    return 2 if errors else 0
