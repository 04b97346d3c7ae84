"""sphinx-gallery configuration and the hooks it calls while executing tips.

The hooks are named by dotted strings in :func:`gallery_conf` so the configuration stays
picklable and Sphinx can cache it.

* :func:`reset_torch` runs before each tip: seed, thread count, backend flags, autocast and
  grad mode back to a known state, so one tip cannot change another's figures.
* :class:`PeakMemory` is sphinx-gallery's ``show_memory`` callable: the CUDA caching
  allocator's peak on a CUDA build, the process's peak resident memory otherwise.
* :func:`collect_result` is registered as an "image scraper": after every code block it reads
  the tip's ``RESULT`` dict from the tip's globals and writes it, with the provenance of the
  run (torch version, device, threads, date), to ``<tip>.result.json`` beside the executed
  page. It emits no reST.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
from pathlib import Path
from typing import Any

from conf import settings, tipmeta

RESULT_SUFFIX = ".result.json"


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
        "reset_modules": ("matplotlib", "conf.gallery.reset_torch"),
        "reset_modules_order": "before",
        "image_scrapers": ("matplotlib", "conf.gallery.collect_result"),
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

def reset_torch(gallery_conf: dict, fname: str | None, when: str) -> None:
    """Put torch's global state back to the build's defaults before a tip runs."""
    import torch

    torch.manual_seed(settings.TIPS_SEED)
    torch.set_num_threads(settings.TIPS_THREADS)
    torch.set_grad_enabled(True)
    torch.set_default_dtype(torch.float32)
    torch.autograd.set_detect_anomaly(False)
    if hasattr(torch, "set_default_device"):
        torch.set_default_device(None)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = False
    torch.use_deterministic_algorithms(False)
    if torch.cuda.is_available():
        torch.cuda.set_sync_debug_mode(0)
        torch.cuda.empty_cache()
    if fname is not None and when == "before":
        # A stale result from an earlier run must never stand in for this run's.
        dirs = gallery_conf["gallery_dirs"]
        for d in dirs if isinstance(dirs, (list, tuple)) else [dirs]:
            for stale in (Path(gallery_conf["src_dir"]) / d).rglob(Path(fname).stem + RESULT_SUFFIX):
                stale.unlink()


def _rss_peak_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("VmHWM not found in /proc/self/status")


def _reset_rss_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")  # resets VmHWM to the current resident size (Linux >= 4.0)
        return True
    except OSError:
        return False


class PeakMemory:
    """``show_memory`` callable: peak memory (MiB) while ``func`` runs, and its return value.

    A class instance rather than a function, so Sphinx can pickle and cache the configuration.
    """

    def __repr__(self) -> str:
        return "conf.gallery.PeakMemory()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PeakMemory)

    def __hash__(self) -> int:
        return hash(PeakMemory)

    def __call__(self, func):
        return _peak_memory(func)


def _peak_memory(func):
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        out = func()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**20, out
    if platform.system() == "Linux" and _reset_rss_peak():
        out = func()
        return _rss_peak_mib(), out
    import resource

    out = func()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, out


def device_description() -> dict[str, Any]:
    """What this build runs on, for the provenance line and the result records."""
    import torch

    if torch.cuda.is_available():
        return {"device": "cuda", "device_name": torch.cuda.get_device_name(0),
                "threads": torch.get_num_threads()}
    return {"device": "cpu", "device_name": cpu_model(), "threads": torch.get_num_threads()}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def build_date() -> str:
    """UTC date of the build; SOURCE_DATE_EPOCH wins for reproducible builds."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    now = (_dt.datetime.fromtimestamp(int(epoch), _dt.UTC) if epoch
           else _dt.datetime.now(_dt.UTC))
    return now.strftime("%Y-%m-%d %H:%M UTC")


def result_path(target_file: str | Path) -> Path:
    """``docs/tips/speed/tip_x.py`` -> ``docs/tips/speed/tip_x.result.json``."""
    target = Path(target_file)
    return target.with_name(target.stem + RESULT_SUFFIX)


def collect_result(block, block_vars: dict, gallery_conf: dict) -> str:
    """Scraper: write the tip's RESULT, with provenance, once the tip has defined it."""
    import torch

    result = block_vars["example_globals"].get("RESULT")
    if result is None:
        return ""
    src = Path(block_vars["src_file"])
    problems = tipmeta.validate_result(result)
    if problems:
        # Raised inside sphinx-gallery's block execution: the tip fails and is named.
        raise ValueError(f"{src.name}: " + "; ".join(problems))
    record = {
        "tip": src.stem,
        "topic": src.parent.name,
        **json.loads(json.dumps(result)),
        "torch": torch.__version__,
        "python": platform.python_version(),
        **device_description(),
        # The build's thread setting (the reset hook's), which a tip may change for itself:
        # records of one build share it, and result sets are told apart by it (conf/results.py).
        "build_threads": settings.TIPS_THREADS,
        "date": build_date(),
    }
    result_path(block_vars["target_file"]).write_text(
        json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return ""


def load_result(target_file: str | Path) -> dict[str, Any] | None:
    path = result_path(target_file)
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))
