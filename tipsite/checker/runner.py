"""Find the files, check them, in worker processes where that pays: the checker's own work.

Both the command line (:mod:`tipsite.checker.cli`) and the benchmark
(:mod:`tipsite.checker.bench`) use this module, and it imports neither of them.
"""

from __future__ import annotations

import gc
import io
import multiprocessing
import os
import stat
import threading
import tokenize
from collections.abc import Callable
from pathlib import Path

SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", "build", "dist", "venv", ".venv"}

_checker = None
_options: dict = {}
_ROOTS: dict[Path, Path] = {}  # a file found under a folder named on the command line -> that folder
GC_THRESHOLD = 20_000  # allocations between collections of the youngest generation (Python: 700)
MAX_BYTES = 8 * 2**20  # a larger .py file is generated data, not code to check
CHUNK = 4  # files a worker process takes at a time, at most


def read_source(path: Path) -> str:
    """The file's text, decoded as Python decodes it (a PEP 263 coding line, a UTF-8 BOM, else
    UTF-8). Only a regular file is opened: a FIFO or a device named ``.py`` would block the read
    or never end. Raises OSError, UnicodeDecodeError or SyntaxError (a bad coding line)."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise OSError("not a regular file (a FIFO, a device or a socket)")
    if info.st_size > MAX_BYTES:
        raise OSError(f"larger than {MAX_BYTES // 2**20} MiB")
    with open(path, "rb") as fh:
        data = fh.read(MAX_BYTES + 1)
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


def collect(paths: list[str], skip: Callable[[Path], bool] | None = None) -> tuple[list[Path], list[str]]:
    """The Python files named, or found under the folders named (hidden folders, virtualenvs and
    build output skipped, and the files ``skip`` refuses), and an error for each missing path."""
    files, errors = [], []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            for found in sorted(path.rglob("*.py")):
                if found.is_dir():  # a folder named x.py: its files are found on their own
                    continue
                rel = found.relative_to(path).parts[:-1]
                if any(part.startswith(".") or part in SKIP_DIRS for part in rel):
                    continue
                if skip is None or not skip(found):
                    files.append(found)
                    _ROOTS[found] = path
        elif path.exists():  # a file, or a FIFO or device named on purpose: read_source() judges it
            if skip is None or not skip(path):
                files.append(path)
        else:
            errors.append(f"{p}: no such file or folder")
    return files, errors


def is_test_path(path: str) -> bool:
    from tipsite.checker.engine import is_test_path as judge

    return judge(path)


def init(torch_release: tuple[int, ...] | None = None, device: str = "cpu",
         codes: set[str] | None = None) -> None:
    """Build the checker once per process (imports libcst and TorchFix: not timed per file), with
    the visitors of ``codes`` only (None: every rule)."""
    global _checker, _options
    from tipsite.checker.engine import Checker

    _options = {"torch_release": torch_release, "device": device, "codes": codes}
    _checker = Checker(torch_release=torch_release, device=device, codes=codes)


def check_file(path: Path) -> tuple[list, str | None]:
    """(findings, error) for one file; runs in a worker process or in this one."""
    if _checker is None:
        init()
    try:
        text = read_source(path)
    except (OSError, UnicodeDecodeError, LookupError) as exc:
        return [], f"{path}: cannot be read: {exc}"
    except SyntaxError as exc:  # an unknown encoding in the coding line
        return [], f"{path}: cannot be read: {exc.msg if hasattr(exc, 'msg') else exc}"
    # a test module is judged by its path inside the folder checked, not by the folders above it
    # (a checkout under /tmp/tests/ is not a test module); a file named alone, by its name
    root = _ROOTS.get(path)
    inside = Path(path).relative_to(root).as_posix() if root is not None else Path(path).name
    try:
        return _checker.check_source(text, str(path), test=is_test_path(inside)), None
    except SyntaxError as exc:
        return [], f"{path}:{exc.lineno or 0}: cannot be parsed: {exc.msg}"
    except Exception as exc:  # a defect of the checker's, on this file only: the others are still checked
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return [], (f"{path}: the checker failed on this file ({type(exc).__name__}: {first}); "
                    "the other files were checked: please report it with this file")


def can_fork() -> bool:
    """Worker processes are forked only from a process with one thread. A fork copies the
    memory but not the other threads, so a lock one of them held stays locked in the child
    for good: inside a pytest-xdist worker (whose execnet thread reads the controller's pipe)
    such a pool of workers once hung the test suite until CI killed it after 90 minutes."""
    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


def processes(n_files: int, jobs: int) -> int:
    """How many processes check ``n_files`` files when ``jobs`` are asked for."""
    return jobs if jobs > 1 and n_files >= 2 * jobs and can_fork() else 1


def check_files(files: list[Path], jobs: int, torch_release: tuple[int, ...] | None = None,
                device: str = "cpu", codes: set[str] | None = None) -> tuple[list, list[str]]:
    if _checker is None or _options != {"torch_release": torch_release, "device": device, "codes": codes}:
        init(torch_release, device, codes)  # once, here: forked workers inherit the imports and the visitors
    # Parsing makes many short-lived objects, and each collection of the youngest generation
    # walks them all: collected ten times less often while checking (a tenth of the CPU time).
    # Worker processes also freeze what they inherit, which their collections then skip.
    threshold = gc.get_threshold()
    gc.set_threshold(max(threshold[0], GC_THRESHOLD), *threshold[1:])
    try:
        if processes(len(files), jobs) > 1:
            with multiprocessing.get_context("fork").Pool(jobs, initializer=gc.freeze) as pool:
                # a few files at a time: with a quarter of the files per chunk, a worker could
                # sit idle for up to half a chunk at the end while the other finished its own
                results = pool.map(check_file, files, chunksize=max(1, min(CHUNK, len(files) // (jobs * 4))))
        else:
            results = [check_file(f) for f in files]
    finally:
        gc.set_threshold(*threshold)
    findings = [f for found, _ in results for f in found]
    errors = [e for _, e in results if e]
    return findings, errors


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)
