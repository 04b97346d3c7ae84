"""``python -m tipsite.checker --bench [N]``: how many files of 200 lines a second the checker reads.

The corpus is real PyTorch code: the gallery's tips, cut at top-level statements into files of
about 200 lines (every file holds findings, as training code does), repeated to N files and
written to a temporary folder. The run times the whole command's work (find the files, read,
parse, check) with the given number of worker processes, and records the machine's load.
"""

from __future__ import annotations

import ast
import os
import resource
import tempfile
import time
from pathlib import Path

from tipsite import tipmeta
from tipsite.checker import runner

LINES = 200


def corpus(n: int, gallery_dir: Path | None = None) -> list[str]:
    pieces = []
    for path in tipmeta.tip_files(gallery_dir):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in tree.body:
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            pieces.append("".join(lines[start - 1:node.end_lineno]))
    files, current, count = [], [], 0
    i = 0
    while len(files) < n and pieces:
        piece = pieces[i % len(pieces)]
        i += 1
        current.append(piece)
        count += piece.count("\n")
        if count >= LINES:
            files.append("".join(current))
            current, count = [], 0
    return files


def run(n: int = 200, jobs: int = 1, texts: list[str] | None = None) -> dict:
    texts = corpus(n) if texts is None else texts
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="checker-bench-") as tmp:
        for i, text in enumerate(texts):
            (Path(tmp) / f"f{i:04d}.py").write_text(text, encoding="utf-8")
        runner.init()  # imports and visitors are built once per run, not per file: not timed
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        start, cpu = time.perf_counter(), time.process_time()
        files, _ = runner.collect([tmp])
        findings, errors = runner.check_files(files, jobs)
        seconds = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_seconds = (time.process_time() - cpu + (after.ru_utime - children.ru_utime)
                       + (after.ru_stime - children.ru_stime))
    lines = sum(t.count("\n") for t in texts)
    return {"files": len(texts), "lines": lines, "jobs": runner.processes(len(files), jobs),
            "seconds": seconds,
            "files_per_s": len(texts) / seconds, "lines_per_file": lines / len(texts),
            "findings": len(findings), "errors": len(errors), "cpu_seconds": cpu_seconds,
            "ms_cpu_per_file": 1000 * cpu_seconds / len(texts),
            "load_before": load_before, "load_after": os.getloadavg()[0], "cores": os.cpu_count()}


def describe(r: dict) -> str:
    busy = min(r["jobs"], r["cores"] or 1)
    return (f"{r['files']} files of {r['lines_per_file']:.0f} lines ({r['findings']} findings) in "
            f"{r['seconds']:.2f} s with {r['jobs']} process(es): {r['files_per_s']:.1f} files/s; "
            f"{r['ms_cpu_per_file']:.1f} ms of CPU per file, so {1000 * busy / r['ms_cpu_per_file']:.0f} "
            f"files/s on {busy} idle core(s); {r['cores']} cores, load average "
            f"{r['load_before']:.2f} before, {r['load_after']:.2f} after")
