"""Run one tip as a reader would, and report what it computed and which warnings it raised.

Usage (standard library only; copied next to the tip and run with the venv's plain python)::

    python tiprunner.py tip_x.py [tip_y.py ...] [--json out.json] [--strict] [--fake-cuda]

Several tips run one after another in the one process (torch's global state put back between
them), which saves starting Python and torch for each; the JSON is then ``{"reports": [...]}``.

The tip runs as ``__main__`` (``runpy.run_path``) with ``sys.argv`` and ``sys.path[0]`` as
``python tip_x.py`` would set them, inside ``warnings.catch_warnings(record=True)``: every
warning the tip lets through is recorded, once per place it was raised. A tip that demonstrates
a deprecated API catches that warning itself in its own ``catch_warnings`` block, which takes
precedence, so only warnings the tip did not expect reach this record.

A warning counts as a *deprecation* when it is a ``DeprecationWarning`` or ``FutureWarning``,
or a ``UserWarning`` whose message says "deprecat". Each warning's ``origin`` says whose it is:

* ``tip``: raised by the tip's own line (torch's C++ warnings and ``@deprecated`` APIs surface
  there), or by torch's Python code while the tip's code was calling it;
* ``torch-internal``: raised by torch's own code while a module was being imported (e.g. a
  torch submodule using a deprecated torch API at import time): torch's business, not the tip's;
* ``other``: raised by another package's Python code (numpy, matplotlib, the standard
  library, ...), even when attributed to the tip's line; recorded, never held against the tip.

``--strict`` turns the tip's deprecations into a failure (exit status 3): the site never
teaches an API that the torch release it runs on deprecates.

With ``--strict`` on a machine without CUDA, the ``torch.cuda`` functions that answer silently
there (``memory_allocated`` reads 0, ``reset_peak_memory_stats`` does nothing, ...) raise
instead: a tip must call them only under ``torch.cuda.is_available()``.

``--fake-cuda`` runs the tip's CUDA branch on a machine without a GPU: ``fakecuda.py`` (copied
beside this runner, see :mod:`tipsite.fakecuda`) makes torch report a CUDA device backed by the
CPU. Its figures mean nothing; the run proves the CUDA code paths work.

``--timeout S`` limits each tip to S seconds: past it an exception is raised in the tip, again
every second, and the tip is reported failed; a tip that does not stop within a grace (it catches
every exception, or loops in C) is killed with this process by a watchdog process, which names it
on stderr. With several tips the JSON file is written after each tip, so a killed run keeps the
reports of the tips before (tipsite/tipcheck.py runs the rest again).

Exit status: 0 ran, 1 the tip raised, 2 bad usage, 3 strict and the tip raised a deprecation.
The JSON holds ``status``, ``error``, ``verdicts`` (per device: verdict and key figure),
``result`` (RESULT, JSON-safe), ``figures`` (how many matplotlib figures are open at the end),
``warnings``, ``torch``, ``device``, ``device_name``, ``threads``, ``python`` and ``seconds``.
"""

from __future__ import annotations

import json
import os
import platform
import runpy
import signal
import subprocess
import sys
import time
import traceback
import warnings

DEPRECATION_WORD = "deprecat"


def is_deprecation(category: type, message: str) -> bool:
    if issubclass(category, (DeprecationWarning, FutureWarning)):
        return True
    return issubclass(category, UserWarning) and DEPRECATION_WORD in message.lower()


# Modules that only relay a warning for someone else (a @deprecated decorator's wrapper).
RELAYS = ("warnings.py", "typing_extensions.py")


def origin(stack: list[str], tip_path: str, torch_dirs: list[str]) -> str:
    """Whose warning it is: 'tip', 'torch-internal' or 'other' (see the module docstring).

    ``stack`` is the file of every Python frame when the warning was raised, outermost first,
    ending with the frame that raised it (a warning raised by C/C++ code ends with its caller).
    """
    def in_torch(f: str) -> bool:
        real = os.path.realpath(f)
        return any(real.startswith(d + os.sep) for d in torch_dirs)

    tip_frames = [i for i, f in enumerate(stack) if os.path.realpath(f) == tip_path]
    if not tip_frames:
        return "torch-internal" if stack and in_torch(stack[-1]) else "other"
    # what ran between the tip's line and the warning, relays left out
    below = [f for f in stack[tip_frames[-1] + 1:] if os.path.basename(f) not in RELAYS]
    if any("importlib" in f for f in below):
        # raised while a module was being imported, e.g. torch importing its own submodules
        return "torch-internal" if any(in_torch(f) for f in below) else "other"
    if not below or any(in_torch(f) for f in below):
        # the tip's own line warned (a C++ warning, a @deprecated API) or torch warned on its call
        return "tip"
    return "other"


def _torch_dirs() -> list[str]:
    import importlib.util

    dirs = []
    for name in ("torch", "torchgen", "functorch"):
        spec = importlib.util.find_spec(name)
        for d in (spec.submodule_search_locations or []) if spec else []:
            dirs.append(os.path.realpath(d))
    return dirs


def _short_path(filename: str, tip_path: str) -> str:
    if filename == tip_path:
        return os.path.basename(tip_path)
    marker = os.sep + "site-packages" + os.sep
    return filename.split(marker, 1)[1] if marker in filename else filename


def _json_safe(value):
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return repr(value)


def _device() -> dict:
    import torch

    if torch.cuda.is_available():
        return {"device": "cuda", "device_name": torch.cuda.get_device_name(0)}
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"device": "cpu", "device_name": name}


# torch.cuda functions that return a plausible answer without CUDA instead of failing.
SILENT_WITHOUT_CUDA = ("memory_allocated", "max_memory_allocated", "memory_reserved",
                       "max_memory_reserved", "reset_peak_memory_stats", "reset_max_memory_allocated",
                       "memory_stats", "mem_get_info", "set_per_process_memory_fraction",
                       "set_sync_debug_mode", "get_sync_debug_mode", "memory_summary")


def guard_cuda_calls():
    """Make the torch.cuda functions that answer silently without CUDA raise instead; returns a
    function that puts them back."""
    import torch

    if torch.cuda.is_available():
        return lambda: None

    def refuse(name):
        def call(*args, **kwargs):
            raise RuntimeError(f"torch.cuda.{name}() called on a machine without CUDA: call it only "
                               "under torch.cuda.is_available() (without CUDA it answers 0 or nothing)")
        return call

    saved = {name: getattr(torch.cuda, name) for name in SILENT_WITHOUT_CUDA if hasattr(torch.cuda, name)}
    for name in saved:
        setattr(torch.cuda, name, refuse(name))

    def restore():
        for name, fn in saved.items():
            setattr(torch.cuda, name, fn)
    return restore


# What a reader who downloads a tip has installed: torch, numpy and matplotlib (and what they
# bring along), besides the standard library.
READER_PACKAGES = ("torch", "numpy", "matplotlib")


class ReaderImports:
    """Refuses, for imports made by the tip's own code, any installed package a reader would
    not have (the test venv has Sphinx, jinja2 and more). Modules the tip writes itself,
    outside site-packages, are its own business.

    It wraps ``builtins.__import__``, so every import statement the tip runs is checked, even
    of a module already imported by the host program or by an earlier tip of the same run (a
    ``sys.meta_path`` finder is not asked for those). With ``finder=True`` it also sits on
    ``sys.meta_path`` for what bypasses the statement (``importlib.import_module``) and is not
    imported yet. :meth:`start` installs it, :meth:`stop` puts everything back."""

    def __init__(self, tip_path: str, finder: bool = False):
        self.tip_path = os.path.realpath(tip_path)
        self.finder = finder
        self._callers: dict[str, bool] = {}  # code file -> whether it is the tip

    def start(self) -> None:
        import builtins

        self._import = builtins.__import__
        builtins.__import__ = self
        if self.finder:
            sys.meta_path.insert(0, self)

    def stop(self) -> None:
        import builtins

        builtins.__import__ = self._import
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def _is_tip(self, code_file: str) -> bool:
        found = self._callers.get(code_file)
        if found is None:
            found = self._callers[code_file] = os.path.realpath(code_file) == self.tip_path
        return found

    @staticmethod
    def _refuse(name: str, where: str) -> None:
        if "site-packages" in where or "dist-packages" in where:
            raise ImportError(f"the tip imports {name!r}, which a reader who downloads it may not "
                              "have: a tip imports only torch, numpy, matplotlib and the standard library")

    def __call__(self, name, globals=None, locals=None, fromlist=(), level=0):
        # torch runs tens of thousands of import statements inside its own functions while a
        # tip times them: this must cost next to nothing there, or it shifts the timings
        if level == 0 and self._is_tip(sys._getframe(1).f_code.co_filename):
            top = name.split(".")[0]
            if top not in READER_PACKAGES and top not in sys.stdlib_module_names:
                module = sys.modules.get(top)
                where = getattr(module, "__file__", None) or ""
                if not module:
                    import importlib.util

                    spec = importlib.util.find_spec(top)
                    where = (spec.origin or "") if spec else ""
                self._refuse(name, where)
        return self._import(name, globals, locals, fromlist, level)

    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if path is not None or top in READER_PACKAGES or top in sys.stdlib_module_names:
            return None
        frame = sys._getframe(1)
        while frame is not None and "importlib" in frame.f_code.co_filename:
            frame = frame.f_back
        if frame is None or not self._is_tip(frame.f_code.co_filename):
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name)
        self._refuse(name, (spec.origin or "") if spec else "")
        return None


def warning_entries(caught: list[tuple], tip_path: str) -> list[dict]:
    """One entry per warning and place: category, message, where, origin, deprecation, count."""
    seen: dict[tuple, dict] = {}
    for category, message, filename, lineno, who in caught:
        key = (category.__name__, message, filename, lineno)
        if key in seen:
            seen[key]["count"] += 1
            continue
        seen[key] = {
            "category": category.__name__,
            "message": message[:500],
            "where": f"{_short_path(filename, tip_path)}:{lineno}",
            "origin": who,
            "deprecation": is_deprecation(category, message),
            "count": 1,
        }
    return list(seen.values())


def offending(entries: list[dict]) -> list[dict]:
    """The deprecation warnings the tip's own code raised (the ones ``--strict`` fails)."""
    return [w for w in entries if w["deprecation"] and w["origin"] == "tip"]


def deprecation_error(entries: list[dict], torch_version: str) -> str:
    return ("the tip's code raised a deprecation warning from torch "
            f"{torch_version} (the tip must not teach a deprecated API, or must "
            "catch the warning it demonstrates): "
            + "; ".join(f"{w['category']}: {w['message']} [{w['where']}]" for w in offending(entries)))


class ReaderConditions:
    """A reader's conditions around a tip that runs inside another program (the site's build):
    imports a reader lacks refused, ``torch.cuda`` calls that answer silently without CUDA
    refused, and every warning the tip's run raises recorded with its origin, as :func:`run`
    does. :meth:`stop` puts everything back and returns the warnings.

    The host program may show warnings its own way (sphinx-gallery writes them into the page
    through ``warnings.formatwarning``): warnings are recorded there, and a warning the host's
    filters would have ignored is recorded but not shown, so the page shows what it showed."""

    def __init__(self, tip_path: str, strict: bool = True):
        self.tip_path = os.path.realpath(tip_path)
        self.strict = strict
        self.caught: list[tuple] = []
        self._imports = ReaderImports(tip_path)

    def start(self) -> None:
        self._filters = list(warnings.filters)
        self._format = warnings.formatwarning
        self._torch_dirs = _torch_dirs()
        self._restore_cuda = guard_cuda_calls() if self.strict else (lambda: None)
        self._imports.start()
        warnings.simplefilter("default")  # once per place, as Python shows warnings by default
        warnings.formatwarning = self._format_and_record

    def stop(self) -> list[dict]:
        warnings.formatwarning = self._format
        warnings.filters[:] = self._filters
        getattr(warnings, "_filters_mutated", lambda: None)()  # the C side caches the filters
        self._imports.stop()
        self._restore_cuda()
        return warning_entries(self.caught, self.tip_path)

    def _format_and_record(self, message, category, filename, lineno, line=None):
        stack = [f.filename for f in traceback.extract_stack()[:-1]]
        self.caught.append((category, str(message), filename, lineno,
                            origin(stack, self.tip_path, self._torch_dirs)))
        if _action(self._filters, category, str(message), _module_of(filename, lineno), lineno) == "ignore":
            return ""
        return self._format(message, category, filename, lineno, line)


def _module_of(filename: str, lineno: int) -> str:
    """The module whose code at ``filename:lineno`` is on the stack (the name filters match)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename == filename and frame.f_lineno == lineno:
            return str(frame.f_globals.get("__name__", ""))
        frame = frame.f_back
    return os.path.splitext(os.path.basename(filename))[0]


def _matches(pattern, text: str) -> bool:
    """A filter's message or module: None matches all, a string only itself (as CPython's own
    filters hold them), a compiled pattern what it matches at the start."""
    if pattern is None:
        return True
    return pattern == text if isinstance(pattern, str) else bool(pattern.match(text))


def _action(filters: list, category: type, message: str, module: str, lineno: int) -> str:
    """What ``filters`` (``warnings.filters``) do with a warning: Python's own matching."""
    for action, msg, cat, mod, ln in filters:
        if (_matches(msg, message) and issubclass(category, cat) and _matches(mod, module)
                and (ln == 0 or lineno == ln)):
            return action
    return "default"


def reset_torch_state(seed: int = 0, threads: int | None = None) -> None:
    """torch's global settings a tip may change, back to their defaults (the build's seed and
    thread count where it sets them; tipsite/gallery.py does so before each tip)."""
    import torch

    torch.manual_seed(seed)
    if threads is not None:
        torch.set_num_threads(threads)
    torch.set_grad_enabled(True)
    torch.set_default_dtype(torch.float32)
    torch.autograd.set_detect_anomaly(False)
    if hasattr(torch, "set_default_device"):
        torch.set_default_device(None)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = False
    if torch.are_deterministic_algorithms_enabled():
        torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def reset_between_tips(threads: int | None = None) -> None:
    """Put back what one tip may change for the next, when several run in one process (the
    thread setting too, when given: each tip starts with the one the first started with)."""
    reset_torch_state(threads=threads)
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


class TipTimedOut(BaseException):
    """A tip ran past ``--timeout``."""


# Past the deadline, if the runner it watches is still its parent, name the tip and kill the
# runner; end when the runner does.
WATCHDOG = """
import os, signal, sys, time
pid, deadline, message = int(sys.argv[1]), time.monotonic() + float(sys.argv[2]), sys.argv[3]
while time.monotonic() < deadline:
    time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    if os.getppid() != pid:
        sys.exit(0)
os.write(2, message.encode() + b"\\n")
os.kill(pid, signal.SIGKILL)
"""
_LIMIT: dict = {}


def grace_s(limit: float) -> float:
    return min(60.0, max(5.0, limit / 10))


def _arm(name: str, limit: float):
    said = f"{name} ran for more than {limit:g} s (the time limit)"

    def expired(signum, frame):
        _LIMIT["expired"] = True
        if _LIMIT.get("in_tip"):
            raise TipTimedOut(said)

    killed = f"error: {said} and did not stop within {grace_s(limit):g} s more: killed"
    watchdog = subprocess.Popen([sys.executable, "-c", WATCHDOG, str(os.getpid()),
                                 str(limit + grace_s(limit)), killed],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    _LIMIT.update(expired=False, in_tip=True, said=said)
    signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, limit, 1.0)
    return watchdog


def _disarm(watchdog) -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)
    watchdog.kill()
    watchdog.wait()


def run(tip_path: str, strict: bool = False, fake_cuda: bool = False, limit: float | None = None) -> dict:
    tip_path = os.path.realpath(tip_path)
    report: dict = {"tip": os.path.splitext(os.path.basename(tip_path))[0], "status": "passed",
                    "error": None, "verdicts": None, "result": None, "warnings": [],
                    "python": platform.python_version(), "fake_cuda": fake_cuda}
    restore_cuda = lambda: None  # noqa: E731
    if fake_cuda and "fakecuda" not in sys.modules:  # once per process: it patches torch
        sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
        import fakecuda

        fakecuda.install()
    elif strict and not fake_cuda:
        restore_cuda = guard_cuda_calls()
    imports = ReaderImports(tip_path, finder=True) if strict else None
    if imports:
        imports.start()
    saved_argv, saved_path0 = sys.argv, sys.path[0]
    sys.argv = [tip_path]
    sys.path[0] = os.path.dirname(tip_path)
    torch_dirs = _torch_dirs()
    # the thread setting the tip started with (a tip may change it); torch is not imported here
    # for it: its import-time warnings are recorded below
    threads = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None
    caught: list[tuple] = []

    def record(message, category, filename, lineno, file=None, line=None):
        # called inside warnings.warn, so the stack is the one that raised the warning
        stack = [f.filename for f in traceback.extract_stack()[:-1]]
        caught.append((category, str(message), filename, lineno, origin(stack, tip_path, torch_dirs)))

    start = time.perf_counter()
    with warnings.catch_warnings():
        # once per place, like Python's default, so a warning in a timing loop is one record
        warnings.simplefilter("default")
        warnings.showwarning = record  # catch_warnings restores it; a tip's own block overrides it
        watchdog = _arm(report["tip"] + ".py", limit) if limit else None
        try:
            try:
                namespace = runpy.run_path(tip_path, run_name="__main__")
            finally:
                _LIMIT["in_tip"] = False
            if _LIMIT.get("expired"):  # it caught the exception and ran on
                raise TipTimedOut(_LIMIT["said"])
        except BaseException as exc:  # noqa: BLE001 - a tip's SystemExit is a failure too
            namespace = {}
            report["status"] = "failed"
            tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
            report["error"] = "".join(tb)[-3000:]
            print("".join(tb), file=sys.stderr)
    if watchdog is not None:
        _disarm(watchdog)
    report["seconds"] = round(time.perf_counter() - start, 2)
    sys.argv, sys.path[0] = saved_argv, saved_path0
    if imports:
        imports.stop()
    restore_cuda()

    import torch

    report["torch"] = torch.__version__
    report.update(_device())
    report["threads"] = threads or torch.get_num_threads()
    result = namespace.get("RESULT")
    if isinstance(result, dict):
        report["result"] = _json_safe(result)
        decided = result.get("verdicts")
        if isinstance(decided, dict):
            report["verdicts"] = {d: {"verdict": v.get("verdict"), "key": _json_safe(v.get("key"))}
                                  for d, v in decided.items() if isinstance(v, dict)}
    elif report["status"] == "passed":
        report["status"] = "failed"
        report["error"] = "the tip finished without defining a RESULT dict"
    if "matplotlib.pyplot" in sys.modules:
        report["figures"] = len(sys.modules["matplotlib.pyplot"].get_fignums())

    report["warnings"] = warning_entries(caught, tip_path)
    for w in report["warnings"]:
        print(f"warning ({w['origin']}): {w['category']}: {w['message']} [{w['where']}]", file=sys.stderr)

    if strict and offending(report["warnings"]) and report["status"] == "passed":
        report["status"] = "failed"
        report["error"] = deprecation_error(report["warnings"], report["torch"])
        print(report["error"], file=sys.stderr)
    return report


def main(argv: list[str]) -> int:
    args = list(argv)
    strict = "--strict" in args
    if strict:
        args.remove("--strict")
    fake_cuda = "--fake-cuda" in args
    if fake_cuda:
        args.remove("--fake-cuda")
    limit = None
    if "--timeout" in args:
        i = args.index("--timeout")
        limit = float(args[i + 1])
        del args[i:i + 2]
    out = None
    if "--json" in args:
        i = args.index("--json")
        out = args[i + 1]
        del args[i:i + 2]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    reports = []
    start_threads = None
    if len(args) > 1:  # every tip starts with torch's thread setting, whatever one before set
        import torch

        start_threads = torch.get_num_threads()
    for i, tip in enumerate(args):
        if len(args) == 1:
            reports.append(run(tip, strict=strict, fake_cuda=fake_cuda, limit=limit))
            continue
        if i:
            reset_between_tips(start_threads)
        print(f"--- {os.path.basename(tip)}", file=sys.stderr, flush=True)
        import contextlib
        import io

        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            report = run(tip, strict=strict, fake_cuda=fake_cuda, limit=limit)
        report["stdout"] = printed.getvalue()[-20000:]
        reports.append(report)
        if out:  # so far: a tip killed later leaves these
            with open(out + ".tmp", "w", encoding="utf-8") as fh:
                json.dump({"reports": reports, "partial": True}, fh, sort_keys=True)
            os.replace(out + ".tmp", out)
    if out:
        with open(out, "w", encoding="utf-8") as fh:
            json.dump(reports[0] if len(reports) == 1 else {"reports": reports}, fh, indent=1, sort_keys=True)
            fh.write("\n")
    failed = [r for r in reports if r["status"] != "passed"]
    if not failed:
        return 0
    return 3 if all(r["error"] and "deprecation warning" in r["error"] for r in failed) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
