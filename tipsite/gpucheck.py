"""Whether a GPU run could see its GPU: the check a CUDA result set must pass before it counts.

torch.profiler reads the GPU through CUPTI. When CUPTI records nothing (reported after a
CUDA-graph capture, or when its records are dropped), every point would read "host-bound" and a
verdict "inconclusive", silently. :func:`tipkit.compare_times` now fails such a tip, and
:func:`tipkit.calibrate` fails a run whose profiler cannot see a matmul; this module is the guard
on the sets themselves (``python -m tipsite.records expect-device cuda ...`` calls
:func:`blind_problems` for every record), for sets made before those checks or by hand:

* a comparison on the device whose profiled pass recorded no GPU activity for a variant
  (``kernels`` 0);
* a comparison that shows GPU timings with no busy time at all for a variant (sets made before
  ``kernels`` was recorded: the same blindness);
* an "inconclusive" decision on the device whose points show no GPU activity: the profiler, not
  the host, made it inconclusive.
"""

from __future__ import annotations


def _blind_sides(c: dict) -> list[str]:
    """The variants of one comparison whose profiled pass saw no GPU activity."""
    sides = []
    for side, label in (("base", c.get("baseline")), ("cand", c.get("candidate"))):
        kernels = (c.get("kernels") or {}).get(side)
        busy = (c.get("device_time") or {}).get(side)
        if kernels == 0 or ("kernels" not in c and "device_time" in c and not busy):
            sides.append(str(label or side))
    return sides


def blind_problems(record: dict, device: str) -> list[str]:
    """Problems of one record's ``device`` decision that a profiler blind to the GPU caused: one
    line each, naming the tip and the comparison. ``[]`` for a record that is fine, a CPU device
    or a record without that device."""
    decision = (record.get("verdicts") or {}).get(device)
    if device == "cpu" or not isinstance(decision, dict):
        return []
    tip = record.get("tip", "?")
    problems = []
    blind_points = 0
    for c in decision.get("comparisons") or []:
        if not isinstance(c, dict):
            continue
        sides = _blind_sides(c)
        if sides:
            blind_points += 1
            problems.append(f"{tip}: comparison {c.get('name')!r} on {device}: the profiler recorded "
                            f"no GPU activity for {', '.join(sides)} (a blind profiler: rerun)")
    if decision.get("verdict") == "inconclusive" and blind_points:
        problems.append(f"{tip}: its {device} verdict is 'inconclusive' because the profiler saw no "
                        "GPU activity, not because the host bound the work")
    return problems
