"""What each tip measured, for the reader's torch and device: the verdict a finding quotes.

Nothing here is typed in: the verdicts come from result records through :mod:`tipsite.records`,
exactly as the site picks them (:func:`tipsite.records.device_states`): the newest record of the
tip's current source, from this checkout's build (``docs/tips/<topic>/<tip>.result.json``, when
the site was built), from the committed result sets (``docs/_data/results/*.json``) and from the
sets named by ``TIPS_RESULT_SETS``. A record from an older version of the tip is "stale"; a
device nothing measured is "not measured".

``--torch X.Y`` keeps only records of that release; by default the installed torch's release is
used. When nothing was measured with that release, the finding says so, and names what was
measured with another release, if anything.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from conf import settings
from tipsite import records, tipmeta
from tipsite.checker.registry import Rule

NOT_MEASURED = records.NOT_MEASURED


@dataclass(frozen=True)
class Target:
    """Whose verdict to show: a torch release (None: any) and a device, and how each was chosen."""

    torch: str | None
    device: str
    torch_from: str
    device_from: str

    @property
    def device_word(self) -> str:
        return records.device_word(self.device)

    def describe(self) -> str:
        torch = f"torch {self.torch}" if self.torch else "any torch release"
        return f"{torch} ({self.torch_from}), {self.device_word} ({self.device_from})"


def _torch_outside_venv() -> tuple[str | None, str]:
    """The torch of the ``python3`` on PATH outside this (nox) virtualenv, without importing it."""
    venv = os.environ.get("VIRTUAL_ENV")
    path = os.environ.get("PATH", "")
    if venv:
        path = os.pathsep.join(p for p in path.split(os.pathsep)
                               if p and not Path(p).resolve().is_relative_to(Path(venv).resolve()))
    python = shutil.which("python3", path=path) or shutil.which("python", path=path)
    if not python:
        return None, ""
    try:
        out = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('torch'))"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None, ""
    version = out.stdout.strip()
    return (version or None), python


def detect_target(torch: str | None = None, device: str | None = None) -> Target:
    """``--torch`` and ``--device``, or the installed torch and the best device present.

    The installed torch is the one importable here, else the one of the ``python3`` on PATH
    outside the checker's own virtualenv (``nox -s check`` runs in one without torch). The best
    device is CUDA when that torch is a CUDA build (not ``+cpu``) and an NVIDIA driver is loaded.
    """
    found, source = None, ""
    if torch:
        torch_from = "--torch"
    else:
        try:
            found, source = importlib.metadata.version("torch"), sys.executable
        except importlib.metadata.PackageNotFoundError:
            found, source = _torch_outside_venv()
        torch = found
        torch_from = f"installed: {source}" if found else "no torch found here: pass --torch X.Y"
    if device:
        device_from = "--device"
    else:
        driver = Path("/proc/driver/nvidia/version").exists()
        cuda_build = bool(found) and "+cpu" not in found
        device = "cuda" if (driver and cuda_build) else "cpu"
        device_from = ("NVIDIA driver and a CUDA build of torch" if device == "cuda"
                       else "no GPU driver found" if not driver else "torch is not a CUDA build")
    if torch:
        torch = ".".join(torch.split("+", 1)[0].split(".")[:2])  # the release: 2.13
    return Target(torch=torch, device=device, torch_from=torch_from, device_from=device_from)


def same_release(record_torch: str, wanted: str) -> bool:
    try:
        have = tipmeta.parse_version(record_torch)
        want = tipmeta.parse_version(wanted)
    except ValueError:
        return False
    return have[: len(want)] == want


@dataclass(frozen=True)
class Verdict:
    """One tip's verdict for the target, as a finding quotes it."""

    tip: str
    title: str
    device: str
    state: str  # "measured" | "stale" | "not measured" | "unknown tip"
    verdict: str | None = None
    key: dict | None = None
    torch: str | None = None  # of the record quoted
    host: str | None = None
    date: str | None = None
    origin: str | None = None
    legacy: bool = False
    elsewhere: str | None = None  # "measured with torch 2.11.0+cu130: depends" when the release differs
    link: str = ""

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _fmt(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def key_text(key: dict | None) -> str:
    """``1.02x speed-up at width 8 (interval 1.01-1.05x)``; '' when the tip has no key figure."""
    if not key:
        return ""
    unit = key.get("unit") or ""
    value = _fmt(key["value"])
    text = f"{value}{unit} {key['name']}" if unit == "x" else f"{value} {unit} {key['name']}"
    low, high = key.get("low"), key.get("high")
    if low is not None and high is not None and low != high:
        sep = "" if unit == "x" else " "
        text += f" (interval {_fmt(low)}-{_fmt(high)}{sep}{unit})"
    return text


class Evidence:
    """Loads the tips' metadata and the result data once; :meth:`verdict` per (tip, target)."""

    def __init__(self, target: Target, *, gallery_dir: Path | None = None, tips_out_dir: Path | None = None,
                 result_paths: list[Path] | None = None, site_url: str | None = None) -> None:
        self.target = target
        self.warnings: list[str] = []
        self.site_url = (site_url if site_url is not None else os.environ.get("TIPS_SITE_URL", "")).rstrip("/")
        self.tips: dict[str, tipmeta.Tip] = {}
        for path in tipmeta.tip_files(gallery_dir):
            try:
                tip = tipmeta.read_tip(path)
            except tipmeta.TipError as exc:
                self.warnings.append(f"tip metadata unreadable, its findings show no verdict: {exc}")
                continue
            self.tips[tip.name] = tip
        self.tips_out_dir = Path(tips_out_dir or settings.TIPS_OUT_DIR)
        if result_paths is None:
            try:
                result_paths = records.committed_paths() + records.paths_from_env()
            except records.RecordError as exc:
                self.warnings.append(str(exc))
                result_paths = records.committed_paths()
        self.sets = []
        for path in result_paths:
            try:
                self.sets.append(records.load_set(path))
            except records.RecordError as exc:
                self.warnings.append(f"result set ignored: {exc}")
        self._built: dict[str, dict | None] = {}
        self._cache: dict[str, Verdict] = {}

    def built_record(self, tip: tipmeta.Tip) -> dict | None:
        """This checkout's build of the tip, when the site was built and the record is valid."""
        if tip.name not in self._built:
            try:
                self._built[tip.name] = records.read_record(self.tips_out_dir / tip.topic / tip.path.name)
            except records.RecordError as exc:
                self.warnings.append(f"built record ignored: {exc}")
                self._built[tip.name] = None
        return self._built[tip.name]

    def link(self, tip_name: str, topic: str) -> str:
        page = f"{settings.TIPS_OUT_DIR.name}/{topic}/{tip_name}.html"
        if self.site_url:
            return f"{self.site_url}/{page}"
        return str(settings.HTML_DIR / page)

    def _states(self, tip: tipmeta.Tip, torch: str | None) -> dict:
        this = self.built_record(tip)
        sets = self.sets
        if torch:
            if this is not None and not same_release(this["torch"], torch):
                this = None
            sets = [{**s, "records": [r for r in s["records"] if same_release(r["torch"], torch)]}
                    for s in self.sets]
        version = records.tip_version(tip.path)
        return records.device_states(tip.name, [self.target.device], version, this, sets)[self.target.device]

    def verdict(self, tip_name: str) -> Verdict:
        if tip_name in self._cache:
            return self._cache[tip_name]
        tip = self.tips.get(tip_name)
        device = self.target.device
        if tip is None:
            v = Verdict(tip_name, tip_name, device, "unknown tip")
        else:
            link = self.link(tip.name, tip.topic)
            state = self._states(tip, self.target.torch)
            elsewhere = None
            if state["state"] == NOT_MEASURED and self.target.torch:
                other = self._states(tip, None)
                if other["state"] != NOT_MEASURED:
                    r = other["record"]
                    stale = " (an older version of the tip)" if other["state"] == "stale" else ""
                    elsewhere = f"measured with torch {r['torch']}{stale}: {other['decision']['verdict']}"
            if state["state"] == NOT_MEASURED:
                v = Verdict(tip.name, tip.title, device, NOT_MEASURED, elsewhere=elsewhere, link=link)
            else:
                d, r = state["decision"], state["record"]
                v = Verdict(tip.name, tip.title, device, state["state"], verdict=d["verdict"], key=d.get("key"),
                            torch=r["torch"], host=(r["hosts"].get(device) or {}).get("name"), date=r["date"],
                            origin=state["origin"], legacy=bool(d.get("legacy")), link=link)
        self._cache[tip_name] = v
        return v


def message(rule: Rule, v: Verdict, target: Target) -> str:
    """The finding, then the advice where the tip's verdict holds, or what the evidence says."""
    dev = records.device_word(v.device)
    release = f" with torch {target.torch}" if target.torch else ""
    if v.state == "unknown tip":
        return f"{rule.finding}; {rule.tip} is not in this gallery: no evidence either way"
    if v.state == NOT_MEASURED:
        also = f" ({v.elsewhere})" if v.elsewhere else ""
        return f"{rule.finding}; not measured on {dev}{release}: no evidence either way{also}"
    if v.state == "stale":
        return (f"{rule.finding}; only an older version of the tip was measured on {dev} "
                f"({v.verdict} then): no current evidence")
    if v.verdict == "holds":
        return f"{rule.finding}; {rule.advice}"
    if v.verdict == "depends":
        return (f"{rule.finding}; whether to change it depends: the tip's measurements on {dev} "
                "hold in some cases and not in others, see its page")
    if v.verdict == "wrong":
        return f"{rule.finding}; the tip measured the usual fix and found it does not hold on {dev}"
    if v.verdict == "outdated":
        return (f"{rule.finding}; the tip finds the usual advice outdated on {dev} with torch "
                f"{v.torch}: see its page for what changed")
    return f"{rule.finding}; the tip's verdict on {dev}: {v.verdict}"


def tail(v: Verdict) -> str:
    """``depends on CUDA (torch 2.11.0+cu130), 1.02x speed-up at width 8, <link>``."""
    dev = records.device_word(v.device)
    if v.state in (NOT_MEASURED, "unknown tip"):
        head = f"{v.state} on {dev}"
    else:
        stale = ", an older version of the tip" if v.state == "stale" else ""
        legacy = ", legacy record" if v.legacy else ""
        head = f"{v.verdict} on {dev} (torch {v.torch}{stale}{legacy})"
    parts = [head, key_text(v.key) if v.state not in (NOT_MEASURED, "unknown tip") else "", v.link]
    return ", ".join(p for p in parts if p)
