"""The devices a tip can measure on: one table entry each, everything device-specific in one place.

A :class:`Device` says what the rest of the project needs to know about a device: its name in
metadata and records (``cuda``), the word readers see (``CUDA``), whether it is an accelerator a
tip prefers when the machine has one, how to tell it is there, how to wait for its queued work, how
to read and reset its peak memory, how to describe this machine's device (the record's ``hosts``
entry), which of those host fields make its **machine class** (the hardware a result depends on,
:func:`machine_class`).

Adding a device (Apple's MPS, say) is one entry in :data:`DEVICES` and its line in
``conf/vocab.toml`` ``[devices]``; the records, the build's hooks, the pages, the charts and the
checks read this table. The tips themselves choose their device in their own code, as a reader's
script would.

Standard library only at import time: torch is imported when a device is asked something.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Instruction-set flags recorded for a CPU: the ones that change what it can do fast.
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni",
             "amx_tile", "amx_bf16", "amx_fp16", "amx_int8", "asimd", "bf16", "sve", "sve2")
# The CPU's tier for a machine class, best first: (word, any of these flags).
CPU_TIERS = (("AMX", ("amx_tile", "amx_bf16")), ("AVX512-BF16", ("avx512_bf16",)),
             ("AVX512", ("avx512f",)), ("AVX2", ("avx2",)), ("Arm SVE", ("sve", "sve2")),
             ("Arm NEON", ("asimd",)))
UNKNOWN_CLASS = "machine class unknown"


def _torch():
    import torch

    return torch


# --- the CPU ---------------------------------------------------------------------------------

def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith(("model name", "Model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    """The relevant instruction-set flags of this CPU (x86 ``flags``, Arm ``Features``)."""
    found: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    found |= set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    return [f for f in CPU_FLAGS if f in found]


def _cpu_host() -> dict[str, Any]:
    return {"name": cpu_model(), "flags": cpu_flags(), "cores": os.cpu_count(),
            "capability": _torch().backends.cpu.get_cpu_capability()}


def _cpu_peak_reset() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")  # resets VmHWM to the current resident size (Linux >= 4.0)
        return True
    except OSError:
        return False


def _cpu_peak_bytes() -> int:
    """The process's peak resident memory since the last reset (Linux), else since it started."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _cpu_tier(host: dict) -> str | None:
    flags = host.get("flags")
    if not isinstance(flags, list):
        return None
    for word, wanted in CPU_TIERS:
        if any(f in flags for f in wanted):
            return word
    return "no AVX2"


def _cpu_class(host: dict) -> str | None:
    tier, cores = _cpu_tier(host), host.get("cores")
    if not host.get("name") or tier is None or not isinstance(cores, int):
        return None
    return f"{host['name']}, {tier}, {cores} cores"


def _cpu_describe(host: dict) -> list[str]:
    flags = ", ".join(f.upper().replace("_", "-") for f in host.get("flags") or [])
    return [flags, f"{host['cores']} cores" if host.get("cores") else ""]


# --- CUDA ------------------------------------------------------------------------------------

def cuda_driver() -> str | None:
    """The NVIDIA driver version, from the kernel module's report (no extra package needed)."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    m = re.search(r"Kernel Module(?: for \S+)?\s+([\d.]+)", text)
    return m.group(1) if m else None


def _cuda_host() -> dict[str, Any]:
    torch = _torch()
    props = torch.cuda.get_device_properties(0)
    major, minor = torch.cuda.get_device_capability(0)
    return {"name": torch.cuda.get_device_name(0), "cuda": torch.version.cuda, "driver": cuda_driver(),
            "capability": f"{major}.{minor}", "sms": int(props.multi_processor_count),
            "memory_gib": round(props.total_memory / 2**30, 1)}


def _cuda_class(host: dict) -> str | None:
    if not host.get("name") or not host.get("capability"):
        return None
    return f"{host['name']}, compute capability {host['capability']}"


def _cuda_describe(host: dict) -> list[str]:
    return [f"CUDA {host['cuda']}" if host.get("cuda") else "",
            f"driver {host['driver']}" if host.get("driver") else ""]


def _cuda_reset() -> None:
    torch = _torch()
    torch.cuda.set_sync_debug_mode(0)
    torch.cuda.empty_cache()


# --- the table -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Device:
    """One device: what the records, the build, the pages and the checks need to know of it."""

    name: str  # in metadata, records and CSS classes
    word: str  # what readers see
    accelerator: bool  # a tip measures here, not on the CPU, when the machine has it
    is_available: Callable[[], bool]
    synchronize: Callable[[], None]  # wait for the work queued on it
    reset_peak: Callable[[], Any]  # start counting peak memory from now
    peak_bytes: Callable[[], int]  # peak memory since reset_peak
    host: Callable[[], dict[str, Any]]  # this machine's device, as the record's hosts entry
    machine_class: Callable[[dict], str | None]  # from a hosts entry; None: not enough known
    describe: Callable[[dict], list[str]]  # provenance words beyond its name
    reset: Callable[[], None] = field(default=lambda: None)  # before each tip in a build


DEVICES: dict[str, Device] = {
    "cpu": Device(
        name="cpu", word="CPU", accelerator=False, is_available=lambda: True,
        synchronize=lambda: None, reset_peak=_cpu_peak_reset, peak_bytes=_cpu_peak_bytes,
        host=_cpu_host, machine_class=_cpu_class, describe=_cpu_describe),
    "cuda": Device(
        name="cuda", word="CUDA", accelerator=True,
        is_available=lambda: _torch().cuda.is_available(),
        synchronize=lambda: _torch().cuda.synchronize(),
        reset_peak=lambda: _torch().cuda.reset_peak_memory_stats(),
        peak_bytes=lambda: _torch().cuda.max_memory_allocated(),
        host=_cuda_host, machine_class=_cuda_class, describe=_cuda_describe, reset=_cuda_reset),
}


def get(name: str) -> Device:
    try:
        return DEVICES[name]
    except KeyError:
        raise ValueError(f"unknown device {name!r} (known: {', '.join(DEVICES)})") from None


def word(name: str) -> str:
    return DEVICES[name].word if name in DEVICES else str(name).upper()


def available() -> set[str]:
    """The devices this machine has (the CPU always)."""
    return {name for name, d in DEVICES.items() if d.is_available()}


def primary(names: Iterable[str]) -> str:
    """The device a build on a machine with ``names`` is about: its accelerator, else the CPU."""
    names = set(names)
    return next((n for n, d in DEVICES.items() if d.accelerator and n in names), "cpu")


def hosts() -> dict[str, dict[str, Any]]:
    """Each device of this machine, described as a record's ``hosts`` holds it."""
    return {name: d.host() for name, d in DEVICES.items() if d.is_available()}


def machine_class(device: str, host: dict | None) -> str:
    """The machine class a result on ``device`` depends on, e.g. ``AMD EPYC, AVX512-BF16, 2 cores``
    or ``NVIDIA H200, compute capability 9.0``; :data:`UNKNOWN_CLASS` where the host fields that
    make it were not recorded (older data): never merged with a known one."""
    if device not in DEVICES or not isinstance(host, dict):
        return UNKNOWN_CLASS
    return DEVICES[device].machine_class(host) or UNKNOWN_CLASS


def required(tip_devices: Iterable[str], machine: Iterable[str]) -> set[str]:
    """The devices a run on a machine with ``machine`` must decide for a tip measuring
    ``tip_devices``: each accelerator it measures that the machine has; the CPU where it measures
    only the CPU, or none of its accelerators is there."""
    tip_devices, machine = set(tip_devices), set(machine)
    need = {d for d in tip_devices if d in DEVICES and DEVICES[d].accelerator and d in machine}
    if "cpu" in tip_devices and not need:
        need.add("cpu")
    return need
