"""sphinx-gallery configuration and the hooks it calls while executing tips.

The hooks are named by dotted strings in :func:`gallery_conf` so the configuration stays
picklable and Sphinx can cache it.

* :func:`reset_torch` runs before each tip: seed, thread count, backend flags, autocast and
  grad mode back to a known state, so one tip cannot change another's figures.
* :class:`PeakMemory` is sphinx-gallery's ``show_memory`` callable: the peak memory of the
  build's device (:mod:`tipsite.devices`: the CUDA caching allocator's on a CUDA build, the
  process's peak resident memory otherwise).
* :func:`collect_figures` and :func:`collect_result` are registered as "image scrapers":
  after every code block the first notes what each open matplotlib figure plots (before
  matplotlib's scraper saves it), the second reads the tip's ``RESULT`` from the tip's globals,
  validates it and writes it with the provenance of the run and the figures' data as the tip's
  record, ``<tip>.result.json`` beside the executed page (:mod:`tipsite.records`). Neither
  emits reST.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from conf import settings
from tipsite import devices, tipmeta, tiprunner


def gallery_conf(examples_dir: Path | str, gallery_dir: Path | str, *,
                 filename_pattern: str = r"/tip_") -> dict[str, Any]:
    """The ``sphinx_gallery_conf`` for a gallery of tips (the site's, or a test's tiny one)."""
    return {
        "examples_dirs": str(examples_dir),
        "gallery_dirs": str(gallery_dir),
        # Execute every tip file; helpers or notes would not match and are not allowed anyway.
        "filename_pattern": filename_pattern,
        "ignore_pattern": r"__init__\.py",
        "within_subsection_order": "FileNameSortKey",
        "remove_config_comments": True,
        "reset_modules": ("matplotlib", "tipsite.gallery.reset_torch"),
        # "after" too: the per-tip time limit is cancelled once the tip has run.
        "reset_modules_order": "both",
        # collect_figures reads each figure before matplotlib's scraper saves and closes it.
        "image_scrapers": ("tipsite.gallery.collect_figures", "matplotlib",
                           "tipsite.gallery.collect_result"),
        "show_memory": PeakMemory(),
        "download_all_examples": True,
        "first_notebook_cell": None,
        "line_numbers": False,
        "plot_gallery": "True",
        # A failing tip fails the build; the summary at the end names every failing tip.
        "abort_on_example_error": False,
        "only_warn_on_example_error": False,
        "expected_failing_examples": [],
        "capture_repr": ("_repr_html_", "__repr__"),
        "matplotlib_animations": False,
        "min_reported_time": 0,
        "show_signature": False,
        "copyfile_regex": "",
        "write_computation_times": True,
    }


# --- hooks -----------------------------------------------------------------------------------

class TipTimeout(SystemExit):
    """A tip ran past ``TIPS_TIMEOUT``: the build stops, naming it (not a Sphinx crash report)."""


def timeout_s() -> float:
    """The per-tip time limit: ``TIPS_TIMEOUT`` seconds, else ``settings.TIPS_TIMEOUT_S``."""
    text = os.environ.get("TIPS_TIMEOUT", "").strip()
    if not text:
        return settings.TIPS_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        raise SystemExit(f"error: TIPS_TIMEOUT must be a number of seconds, got {text!r}") from None
    if not value > 0:
        raise SystemExit(f"error: TIPS_TIMEOUT must be positive, got {text!r}")
    return value


def grace_s(limit: float) -> float:
    """How long a tip past its limit has to stop before its process is killed."""
    return min(60.0, max(5.0, limit / 10))


# The watchdog process the reader's runner uses (tiprunner.WATCHDOG): past the deadline, if the
# build it watches is still its parent, it names the tip on the build's stderr and kills it.

# The tip whose time limit is armed: its file name, whether its limit passed, its watchdog.
_ARMED: dict[str, Any] = {}


def _arm_timeout(fname: str) -> None:
    """The per-tip time limit, in two steps. At the limit a :class:`TipTimeout` is raised in the
    tip, and again every second while it runs on (a tip may catch it); a tip that ends after
    that still fails the build (:func:`_disarm_timeout`). A tip that does not end within
    :func:`grace_s` more (it catches every exception, or loops in C where no Python signal
    handler runs) is ended with its process by a watchdog process, which names it."""
    _disarm_timeout()
    limit = timeout_s()
    name = Path(fname).name
    said = (f"error: {name} ran for more than {limit:g} s (TIPS_TIMEOUT): the build stopped. "
            "Make the tip faster, or raise TIPS_TIMEOUT.")

    def expired(signum, frame):
        _ARMED["expired"] = True
        raise TipTimeout(said)

    import subprocess
    import sys

    killed = (f"error: {name} ran for more than {limit:g} s (TIPS_TIMEOUT) and did not stop within "
              f"{grace_s(limit):g} s more: the build was killed with it.")
    watchdog = subprocess.Popen([sys.executable, "-c", tiprunner.WATCHDOG, str(os.getpid()),
                                 str(limit + grace_s(limit)), killed],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    _ARMED.update(name=name, expired=False, watchdog=watchdog, said=said)
    signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, limit, 1.0)


def _disarm_timeout() -> bool:
    """Cancel the armed time limit and its watchdog; whether the limit had passed."""
    signal.setitimer(signal.ITIMER_REAL, 0)
    watchdog = _ARMED.pop("watchdog", None)
    if watchdog is not None:
        watchdog.kill()
        watchdog.wait()
    expired = _ARMED.pop("expired", False)
    _ARMED.clear()
    return expired


def reset_torch(gallery_conf: dict, fname: str | None, when: str) -> None:
    """Before a tip: torch's global state back to the build's defaults, the tip's cache entry
    and record removed, its time limit armed, a reader's conditions set (:func:`_run_as_reader`).
    After it: the time limit disarmed, the conditions lifted, the warnings the run raised added
    to its record."""
    if when == "after":
        said = _ARMED.get("said")
        if _disarm_timeout():  # the tip caught its TipTimeout and ran on: it still failed
            _discard_record(gallery_conf, fname)
            raise TipTimeout(said)
        if fname is not None:
            _end_reader_run(gallery_conf, fname)
        return
    tiprunner.reset_torch_state(settings.TIPS_SEED, settings.TIPS_THREADS)
    for name in devices.available():
        devices.get(name).reset()
    if fname is None:
        return
    from tipsite import records

    for key in [k for k in _FIGURES if Path(k).name == Path(fname).name]:
        del _FIGURES[key]
    dirs = gallery_conf["gallery_dirs"]
    for d in dirs if isinstance(dirs, (list, tuple)) else [dirs]:
        for topic_dir in filter(Path.is_dir, (Path(gallery_conf["src_dir"]) / d).iterdir()):
            # A stale result must never stand in for this run's, and a run that fails or is
            # interrupted must not leave the MD5 of an older success: the next build runs it again.
            for stale in (topic_dir / (Path(fname).stem + records.RECORD_SUFFIX),
                          topic_dir / (Path(fname).name + ".md5")):
                stale.unlink(missing_ok=True)
    _arm_timeout(fname)
    _run_as_reader(gallery_conf, fname)


# The reader's conditions of the tip running now (tipsite/tiprunner.py), by file name.
_READER_RUNS: dict[str, Any] = {}


def _examples_dirs(gallery_conf: dict) -> list[Path]:
    dirs = gallery_conf["examples_dirs"]
    return [Path(gallery_conf["src_dir"]) / d for d in (dirs if isinstance(dirs, (list, tuple)) else [dirs])]


def _run_as_reader(gallery_conf: dict, fname: str) -> None:
    """The build runs each tip's download as a reader who downloaded it would: a package a reader
    lacks cannot be imported, a ``torch.cuda`` call that answers silently without CUDA raises, and
    every warning the run raises is recorded with whose it is (the record's ``warnings``). The
    suite reads that run; it does not run the tip again (tests/test_standalone.py)."""
    end_reader_runs(disarm=False)  # one a stopped tip left behind (its "after" hook never ran)
    name = Path(fname).name
    found = [p for d in _examples_dirs(gallery_conf) for p in sorted(d.glob(f"*/{name}"))]
    if not found:
        return
    run = tiprunner.ReaderConditions(str(found[0]))
    run.start()
    _READER_RUNS[name] = run


def end_reader_runs(disarm: bool = True) -> None:
    """Lift every reader's condition still set (a tip stopped before its "after" hook), and its
    time limit: the process goes on, as a test's in-process build does, with torch and imports as
    they were."""
    if disarm:
        _disarm_timeout()
    while _READER_RUNS:
        _READER_RUNS.popitem()[1].stop()


def _discard_record(gallery_conf: dict, fname: str | None) -> None:
    """A tip that ran past its limit leaves no record, even one it wrote before."""
    from tipsite import records

    dirs = gallery_conf["gallery_dirs"]
    for d in dirs if isinstance(dirs, (list, tuple)) else [dirs]:
        for path in (Path(gallery_conf["src_dir"]) / d).glob(f"*/{Path(fname or '').stem}{records.RECORD_SUFFIX}"):
            path.unlink(missing_ok=True)
    end_reader_runs()


def _end_reader_run(gallery_conf: dict, fname: str) -> None:
    from tipsite import records

    run = _READER_RUNS.pop(Path(fname).name, None)
    if run is None:
        return
    entries = run.stop()
    dirs = gallery_conf["gallery_dirs"]
    for d in dirs if isinstance(dirs, (list, tuple)) else [dirs]:
        for path in (Path(gallery_conf["src_dir"]) / d).glob(f"*/{Path(fname).stem}{records.RECORD_SUFFIX}"):
            record = records.read_record(path.with_name(Path(fname).name))
            if record is not None:
                records.write_record(path, {**record, "warnings": entries})


class PeakMemory:
    """``show_memory`` callable: peak memory (MiB) while ``func`` runs, and its return value.

    A class instance rather than a function, so Sphinx can pickle and cache the configuration.
    """

    def __repr__(self) -> str:
        return "tipsite.gallery.PeakMemory()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PeakMemory)

    def __hash__(self) -> int:
        return hash(PeakMemory)

    def __call__(self, func):
        return _peak_memory(func)


def _peak_memory(func):
    """The peak memory (MiB) of the build's device (its accelerator, else the process on the CPU)."""
    device = devices.get(devices.primary(devices.available()))
    device.synchronize()
    device.reset_peak()
    out = func()
    device.synchronize()
    return device.peak_bytes() / 2**20, out


def _errorbar_roles(ax) -> dict[int, tuple[str, str]]:
    """id(line) -> (series label, role) for every errorbar's lines: matplotlib labels the
    container, not its data line, and draws the interval's ends as two marker-only lines."""
    roles: dict[int, tuple[str, str]] = {}
    for container in ax.containers:
        if not hasattr(container, "has_yerr"):  # an ErrorbarContainer: (data, caps, bars)
            continue
        data_line, caplines = container.lines[0], container.lines[1]
        if data_line is None:
            continue
        label = str(container.get_label())
        roles[id(data_line)] = (label, "data")
        ys = [float(y) for y in data_line.get_ydata()]
        for cap in caplines or ():
            below = all(float(c) <= y for c, y in zip(cap.get_ydata(), ys))
            roles[id(cap)] = (label, "low" if below else "high")
    return roles


def _figure_data(fig) -> dict[str, Any]:
    """What a matplotlib figure plots: per axes its labels, scales and every line's points.

    An errorbar's data line carries the series' label; the ends of its intervals are lines
    labelled ``_errorbar`` with ``of`` (the series) and ``bound`` (``low`` or ``high``)."""
    axes = []
    for ax in fig.get_axes():
        lines = []
        roles = _errorbar_roles(ax)
        for line in ax.get_lines():
            label = str(line.get_label())
            xs, ys = line.get_xdata(), line.get_ydata()
            if label.startswith("_child") and len(xs) == 2 and len(set(map(float, ys))) == 1:
                label = "_hline"  # axhline: a reference line
            entry: dict[str, Any] = {"label": label}
            series, role = roles.get(id(line), (None, None))
            if role == "data":
                entry["label"] = series
            elif role in ("low", "high"):
                entry.update(label="_errorbar", of=series, bound=role)
            lines.append({**entry, "x": [float(x) for x in xs], "y": [float(y) for y in ys]})
        axes.append({"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
                     "xscale": ax.get_xscale(), "yscale": ax.get_yscale(), "lines": lines})
    return {"axes": axes}


# The figures each tip drew so far in this build (tip file -> figures, in order).
_FIGURES: dict[str, list[dict[str, Any]]] = {}


def collect_figures(block, block_vars: dict, gallery_conf: dict) -> str:
    """Scraper, before matplotlib's: note what every open figure plots, in the order
    sphinx-gallery numbers them, so the record carries the data behind each image."""
    import matplotlib.pyplot as plt

    figures = _FIGURES.setdefault(str(block_vars["src_file"]), [])
    for num in plt.get_fignums():
        figures.append(_figure_data(plt.figure(num)))
    return ""


def collect_result(block, block_vars: dict, gallery_conf: dict) -> str:
    """Scraper: write the tip's RESULT, with provenance, once the tip has defined it.

    The RESULT must be valid (its verdicts re-derive from their evidence), and it must decide
    every device that this run had to measure (:func:`tipsite.records.required_devices`);
    otherwise the tip fails here, named, and no record is written.
    """

    from tipsite import records

    result = block_vars["example_globals"].get("RESULT")
    if result is None or _ARMED.get("expired"):  # past its time limit: no record
        return ""
    src = Path(block_vars["src_file"])
    problems = records.result_problems(result)
    if not problems:
        tip = tipmeta.read_tip(src)
        problems = records.coverage_problems(result, tip.devices, devices.available())
    if problems:
        # Raised inside sphinx-gallery's block execution: the tip fails and is named.
        raise ValueError(f"{src.name}: " + "; ".join(problems))
    # The build's thread setting (the reset hook's); each decision names the threads it used.
    record = records.make_record(src, result, build_threads=settings.TIPS_THREADS)
    record["figures"] = _FIGURES.get(str(src), [])
    records.write_record(records.record_path(block_vars["target_file"]), record)
    return ""
