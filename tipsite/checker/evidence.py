"""What each tip measured, for the reader's torch and device: the verdict a finding quotes.

Nothing here is typed in. The verdicts ship with the checker as data, ``evidence.json`` beside
this module, which :mod:`tipsite.checker.shipdata` generates from the result records through
:mod:`tipsite.records`, exactly as the site picks them (the newest record of the tip's current
source; an older version's record is "stale"; a device nothing measured is "not measured"); a
test keeps the file equal to what the records give. So the installed checker needs neither
this repository nor a built site. In the repository, ``--records`` reads the records
themselves instead (this checkout's build, the committed result sets, ``TIPS_RESULT_SETS``).

This module imports nothing of the site (no ``conf``, no :mod:`tipsite.records`): it is what an
installed checker runs.

``--torch X.Y`` keeps only records of that release (``--torch any``: whichever release measured
it); by default the installed torch's release. A finding whose tip **holds** for that device and
release is an error (it fails the run); every other finding is a note.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tipsite.checker.registry import Rule

DATA_FILE = "evidence.json"
SCHEMA = "tips-checker-evidence/1"
NOT_MEASURED = "not measured"
# The published site the links point to; ``--site-url``, ``TIPS_SITE_URL`` or the configuration's
# ``site-url`` override it. Empty: no link is printed (``--explain CODE`` gives the evidence).
SITE_URL = ""
ANY = "any"


def release(version: str) -> tuple[int, ...] | None:
    """``2.13.0+cpu`` -> ``(2, 13)``; None when it does not read as a release."""
    m = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class Target:
    """Whose verdict to show: a torch release (None: any) and a device, and how each was chosen."""

    torch: str | None
    device: str
    torch_from: str
    device_from: str

    @property
    def release(self) -> tuple[int, ...] | None:
        return release(self.torch) if self.torch else None

    def describe(self, words: dict[str, str] | None = None) -> str:
        torch = f"torch {self.torch}" if self.torch else "any torch release"
        word = (words or {}).get(self.device, self.device.upper())
        return f"{torch} ({self.torch_from}), {word} ({self.device_from})"


def _torch_outside_venv() -> tuple[str | None, str]:
    """The torch of the ``python3`` on PATH outside this virtualenv, without importing it."""
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


def detect_target(torch: str | None = None, device: str | None = None, *, torch_from: str = "--torch",
                  device_from: str = "--device") -> Target:
    """``torch`` and ``device`` as given, or the installed torch and the best device present.

    The installed torch is the one importable here, else the one of the ``python3`` on PATH
    outside the checker's own virtualenv (``nox -s check`` runs in one without torch). The best
    device is CUDA when that torch is a CUDA build (not ``+cpu``) and an NVIDIA driver is loaded.
    ``torch="any"`` takes whichever release measured a tip.
    """
    found = None
    if torch and torch.lower() == ANY:
        torch = None
        torch_from = f"{torch_from} any"
    elif not torch:
        try:
            found, source = importlib.metadata.version("torch"), sys.executable
        except importlib.metadata.PackageNotFoundError:
            found, source = _torch_outside_venv()
        torch = found
        torch_from = f"installed: {source}" if found else "no torch found here: pass --torch X.Y"
    if not device:
        driver = Path("/proc/driver/nvidia/version").exists()
        cuda_build = bool(found) and "+cpu" not in found
        device = "cuda" if (driver and cuda_build) else "cpu"
        device_from = ("NVIDIA driver and a CUDA build of torch" if device == "cuda"
                       else "no GPU driver found" if not driver else "torch is not a CUDA build")
    if torch:
        rel = release(torch)
        torch = ".".join(map(str, rel)) if rel else torch
    return Target(torch=torch, device=device, torch_from=torch_from, device_from=device_from)


@dataclass(frozen=True)
class Verdict:
    """One tip's verdict for the target, as a finding quotes it."""

    tip: str
    title: str
    device: str  # the device whose verdict this is (the host CPU's for a tip about the CPU only)
    state: str  # "measured" | "stale" | "not measured" | "unknown tip" | "not about this device"
    verdict: str | None = None
    key: dict | None = None
    torch: str | None = None  # of the record quoted
    host: str | None = None
    date: str | None = None
    origin: str | None = None
    legacy: bool = False
    elsewhere: str | None = None  # "depends with torch 2.11.0+cu130" when only another release measured it
    link: str = ""

    @property
    def holds(self) -> bool:
        return self.state == "measured" and self.verdict == "holds"

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
    low, high = key.get("low"), key.get("high")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)) and 0 < low < high / 2:
        # as the site's pages: an interval whose ends are more than 2x apart settles nothing
        sep = "" if unit == "x" else " "
        return (f"{key['name']}: not settled (interval {_fmt(low)}-{_fmt(high)}{sep}{unit}: "
                "its ends are more than 2x apart)")
    value = _fmt(key["value"])
    text = f"{value}{unit} {key['name']}" if unit == "x" else f"{value} {unit} {key['name']}".replace("  ", " ")
    low, high = key.get("low"), key.get("high")
    if low is not None and high is not None and low != high:
        sep = "" if unit == "x" else " "
        text += f" (interval {_fmt(low)}-{_fmt(high)}{sep}{unit})"
    return text


def load_data() -> dict:
    """The evidence shipped with the checker."""
    text = resources.files("tipsite.checker").joinpath(DATA_FILE).read_text(encoding="utf-8")
    data = json.loads(text)
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{DATA_FILE}: schema {SCHEMA!r} expected")
    return data


class Evidence:
    """The tips' verdicts (shipped data, or ``data`` built from the records); :meth:`verdict`."""

    def __init__(self, target: Target, data: dict | None = None, *, site_url: str | None = None) -> None:
        self.target = target
        self.data = data if data is not None else load_data()
        self.warnings: list[str] = list(self.data.get("warnings", []))
        url = site_url if site_url is not None else os.environ.get("TIPS_SITE_URL") or SITE_URL
        self.site_url = (url or "").rstrip("/")
        self.words: dict[str, str] = self.data.get("devices", {})
        self._cache: dict[str, Verdict] = {}

    def word(self, device: str) -> str:
        return self.words.get(device, device.upper())

    def link(self, tip_name: str) -> str:
        tip = self.data["tips"].get(tip_name)
        if not self.site_url or tip is None:
            return ""
        return f"{self.site_url}/tips/{tip['topic']}/{tip_name}.html"

    def device_for(self, tip: dict) -> str | None:
        """The device whose verdict judges a finding on the target device: that device when the
        tip measures it; the CPU when the tip is about the CPU alone (the host side of any machine,
        a GPU's included); None when the tip is about other devices only (CUDA's pinned memory
        on a CPU-only machine)."""
        device = self.target.device
        if device in tip["devices"]:
            return device
        if tip["devices"] == ["cpu"]:
            return "cpu"
        return None

    def verdict(self, tip_name: str) -> Verdict:
        if tip_name in self._cache:
            return self._cache[tip_name]
        tip = self.data["tips"].get(tip_name)
        if tip is None:
            v = Verdict(tip_name, tip_name, self.target.device, "unknown tip")
        else:
            v = self._verdict(tip_name, tip)
        self._cache[tip_name] = v
        return v

    def _verdict(self, name: str, tip: dict) -> Verdict:
        link = self.link(name)
        device = self.device_for(tip)
        if device is None:
            return Verdict(name, tip["title"], self.target.device, "not about this device", link=link)
        states = tip["states"].get(device, {})
        wanted = self.target.torch or ANY
        state = states.get(wanted)
        if state is None:
            other = states.get(ANY)
            elsewhere = None
            if other is not None:
                stale = ", an older version of the tip" if other["state"] == "stale" else ""
                elsewhere = f"{other['verdict']} with torch {other['torch']}{stale}"
            return Verdict(name, tip["title"], device, NOT_MEASURED, elsewhere=elsewhere, link=link)
        return self.state_verdict(name, device, state)

    def state_verdict(self, tip_name: str, device: str, state: dict) -> Verdict:
        """The verdict one measured state of the tip gives (``tips[tip_name]["states"][device][release]``),
        as a finding quotes it: for the target, and for each release ``--explain`` lists."""
        tip = self.data["tips"][tip_name]
        return Verdict(tip_name, tip["title"], device, state["state"], verdict=state["verdict"], key=state.get("key"),
                       torch=state["torch"], host=state.get("host"), date=state.get("date"),
                       origin=state.get("set"), legacy=bool(state.get("legacy")), link=self.link(tip_name))


# --- what a finding says --------------------------------------------------------------------------

def note(v: Verdict, word) -> str:
    """Why a finding is a note (no advice): what the evidence for the target says, in a few words."""
    dev = word(v.device)
    if v.state == "unknown tip":
        return "no tip measured it"
    if v.state == "not about this device":
        return f"its tip is about other devices than {dev}"
    if v.state == NOT_MEASURED:
        return f"not measured on {dev} with this torch" + (f"; {v.elsewhere}" if v.elsewhere else "")
    if v.state == "stale":
        return f"only an older version of its tip was measured on {dev}: {v.verdict} then"
    if v.verdict == "holds":
        return ""
    if v.verdict in ("depends", "wrong", "outdated"):
        return f"{v.verdict} on {dev}"
    return f"{v.verdict} on {dev}: no advice"  # a verdict word this checker does not know


NOT_ADVISED = "its fix, not advised here:"


def short(rule: Rule, v: Verdict, word) -> str:
    """The finding's one-line message: what the code does and its fix in a short clause, as
    advice where its tip holds, else named as the tip's fix, not advised, after what the
    evidence says instead."""
    if v.holds:
        return f"{rule.short}; {rule.fix}"
    return f"{rule.short} ({note(v, word)}; {NOT_ADVISED} {rule.fix})"


def message(rule: Rule, v: Verdict, word) -> str:
    """The long form (``--explain``, ``--verbose``, JSON): finding, then advice or evidence."""
    if v.holds:
        return f"{rule.finding}; {rule.advice}"
    return f"{rule.finding}; no advice: {note(v, word)}"


def tail(v: Verdict, word) -> str:
    """``holds on CUDA (torch 2.11.0+cu130, H200, 2026-11-26), 1.19x ...``: the evidence line."""
    dev = word(v.device)
    if v.state in (NOT_MEASURED, "unknown tip", "not about this device"):
        return f"{v.state} on {dev}" + (f" ({v.elsewhere})" if v.elsewhere else "")
    where = ", ".join(p for p in (f"torch {v.torch}", v.host, (v.date or "")[:10]) if p)
    stale = ", an older version of the tip" if v.state == "stale" else ""
    legacy = ", legacy record" if v.legacy else ""
    head = f"{v.verdict} on {dev} ({where}{stale}{legacy})"
    return ", ".join(p for p in (head, key_text(v.key)) if p)


FAIL_ON = ("holds", "any", "never")


def fails(v: Verdict, fail_on: str) -> bool:
    """Whether a finding with this evidence fails the run (``--fail-on``)."""
    if fail_on == "any":
        return True
    if fail_on == "never":
        return False
    return v.holds
