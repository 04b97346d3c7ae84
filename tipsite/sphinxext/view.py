"""What the site knows about one tip, gathered once: the view every template renders.

A :class:`TipView` joins the tip's metadata (:mod:`tipsite.tipmeta`), this build's record of it,
the records of other builds (committed result sets and ``TIPS_RESULT_SETS``), the claims it
examines, its related tips and its row on the compatibility page. Per device it holds a
:class:`DeviceView`: the verdict from the newest record of the tip's current source, or that only
an older version was measured there ("stale"), or "not measured".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sphinx.util import logging

from conf import settings
from tipsite import devices, records, tipkit, tipmeta
from tipsite.sphinxext import vocabulary as _states
from tipsite.sphinxext.render import anchor_name, interval, number, quantity

CLAIM_MAX = 180

logger = logging.getLogger(__name__)
_API_URL_RE = re.compile(r"/generated/((?:torch|numpy)[\w.]*?)(?:\.html|#|$)")


def api_names(tip: tipmeta.Tip) -> list[str]:
    """Dotted API names the tip is about: its ``torch.*`` keywords and documentation pages."""
    names = [k for k in tip.keywords if re.fullmatch(r"torch(\.\w+)+", k)]
    for url in tip.docs:
        m = _API_URL_RE.search(url)
        if m:
            names.append(m.group(1))
    return list(dict.fromkeys(names))


def _same(tip: tipmeta.Tip, ref: str) -> bool:
    ref = ref.strip().removesuffix(".py").strip("/")
    return ref in (tip.name, f"{tip.topic}/{tip.name}", tip.docname)


def related_tips(tip: tipmeta.Tip, tips: list[tipmeta.Tip], limit: int = 3) -> list[tipmeta.Tip]:
    """The tip's ``related`` field first, then the tips sharing most claims and tags with it."""
    others = [t for t in tips if t.name != tip.name]
    chosen: list[tipmeta.Tip] = []
    for ref in tip.related:
        match = next((t for t in others if _same(t, ref)), None)
        if match is None:
            logger.warning("%s: sphinx_gallery_tips_related: no tip named %r", tip.path.name, ref)
        elif match not in chosen:
            chosen.append(match)

    def score(other: tipmeta.Tip) -> int:
        return (3 * len(set(tip.claims) & set(other.claims))
                + 2 * len(set(tip.tags) & set(other.tags))
                + (1 if other.topic == tip.topic else 0))

    ranked = sorted((t for t in others if t not in chosen and score(t) >= 2),
                    key=lambda t: (-score(t), t.title.lower()))
    return chosen + ranked[:max(0, limit - len(chosen))]


# One word per state of a device on a tip, from the one table (vocabulary.STATES), used by the header,
# the cards, the filter chips, the search results and the thumbnails: "measured" shows the
# verdict itself. The same states as tokens for CSS classes and search metadata.
STATE_WORDS = {k: v["word"] for k, v in _states.STATES.items()}
STATE_TOKENS = {k: v["token"] for k, v in _states.STATES.items()}
# A decision whose timings ran while other processes took their cores (tipkit.judge) is no
# verdict: every place says so, as it says "not measured".
BUSY = _states.BUSY
BUSY_WORDS = f"{STATE_WORDS['not measured']}: {_states.BUSY_WORD}"
NOT_DECIDED = (BUSY, "inconclusive")  # verdicts that say nothing of the claim


def verdict_word(verdict: str | None) -> str:
    """A verdict as the pages write it: a busy machine's is "not measured: machine busy"."""
    return BUSY_WORDS if verdict == BUSY else str(verdict)


def state_word(state: str) -> str:
    return STATE_WORDS[state]


def state_token(state: str, verdict: str | None = None) -> str:
    """``holds`` for a measured verdict, ``older-tip-version``, ``not-measured`` or
    ``not-applicable`` otherwise."""
    return verdict if state == "measured" and verdict else STATE_TOKENS[state]


@dataclass
class DeviceView:
    device: str
    state: str  # a key of vocabulary.STATES: "measured" | "stale" | "not measured" | "not applicable"
    decision: dict | None = None
    record: dict | None = None
    origin: str | None = None

    def __post_init__(self) -> None:
        # a run that found the machine busy decided nothing (tipkit's verdict "busy")
        if self.decision and self.decision.get("verdict") == _states.BUSY:
            self.state, self.busy = "not measured", True
        else:
            self.busy = False

    @property
    def word(self) -> str:
        return records.device_word(self.device)

    @property
    def verdict(self) -> str | None:
        if self.state not in ("measured", "stale") or not self.decision:
            return None
        return self.decision["verdict"]

    @property
    def token(self) -> str:
        """The verdict when measured, else the state's token (``older-tip-version``,
        ``not-measured``, ``not-applicable``)."""
        return state_token(self.state, self.verdict)

    @property
    def state_token(self) -> str:
        """The state's own token, whatever the verdict: ``current``, ``older-tip-version``..."""
        return STATE_TOKENS[self.state]

    @property
    def date(self) -> str:
        """The day of the run shown (``2026-11-20``), '' when none."""
        return self.when.split(" ", 1)[0]

    @property
    def label(self) -> str:
        """What every place shows for this device: ``holds``, ``holds, older tip version
        (2026-11-20)``, ``not measured``, ``not measured: machine busy`` or ``not applicable``."""
        if self.state == "measured":
            return str(self.verdict)
        if self.state == "stale":
            return f"{self.verdict}, {STATE_WORDS['stale']}" + (f" ({self.date})" if self.date else "")
        if self.busy:
            return f"{STATE_WORDS['not measured']}: {_states.BUSY_WORD}"
        return STATE_WORDS[self.state]

    @property
    def filter_value(self) -> str:
        """The search filter's value for this device: its verdict (``holds``), ``holds, older
        tip version``, ``not measured`` or ``not applicable``: one device's own state."""
        if self.state == "measured":
            return str(self.verdict)
        if self.state == "stale":
            return f"{self.verdict}, {STATE_WORDS['stale']}"
        return STATE_WORDS[self.state]

    @property
    def legacy(self) -> bool:
        return bool(self.decision and self.decision.get("legacy"))

    @property
    def key_text(self) -> str:
        """``1.8x speed-up at width 4 (interval 1.6–2.0x, 12 rounds)``."""
        return key_text((self.decision or {}).get("key"))

    @property
    def headline(self) -> str:
        """What decided the verdict (:func:`headline`)."""
        return headline(self.decision) if self.decision else ""

    @property
    def where(self) -> str:
        """``AMD EPYC, AVX512-BF16, 2 cores, 1 thread, torch 2.13.0+cpu``: the machine class the
        verdict holds for, then how it ran (``NVIDIA H200, compute capability 9.0, CUDA 13.0``)."""
        if not self.record:
            return ""
        host = self.record["hosts"].get(self.device, {})
        parts = [records.machine_class(self.record, self.device)]
        if self.device in devices.DEVICES and self.device != "cpu":
            parts += devices.get(self.device).describe(host)
        threads = "/".join(str(t) for t in (self.decision or {}).get("threads") or [])
        if threads:
            parts.append(f"{threads} thread{'' if threads == '1' else 's'}")
        parts.append(f"torch {self.record['torch']}")
        return ", ".join(p for p in parts if p)

    @property
    def when(self) -> str:
        return self.record["date"] if self.record else ""


@dataclass
class TipView:
    tip: tipmeta.Tip
    record: dict | None  # this build's
    devices: dict[str, DeviceView]
    columns: list[dict]  # every record shown in the figures table, this build's first
    related: list[tipmeta.Tip] = field(default_factory=list)
    claims: list[dict] = field(default_factory=list)
    apis: list[str] = field(default_factory=list)
    origins: dict[int, str] = field(default_factory=dict)  # id(record) -> the set file it came from
    compat_runs: dict[str, dict | None] = field(default_factory=dict)  # the torch-version matrix

    def source(self, record: dict) -> str:
        """Where a record of this tip came from: ``this build``, or ``result set <file name>``."""
        if record is self.record:
            return "this build"
        return f"result set {self.origins.get(id(record), '?').rsplit('/', 1)[-1]}"

    def measured_on(self) -> list[dict]:
        """Every run of this tip the site holds, one row per device: this build, the committed
        and given result sets, the torch-version matrix. Each names its machine class, torch,
        date, verdict (or that it measured an older version of the tip) and what decided it."""
        from tipsite import compat

        version = records.tip_version(self.tip.path)
        rows = []
        for record in self.columns:
            current = records.is_current(record, version)
            for device, decision in (record.get("verdicts") or {}).items():
                rows.append({"device": records.device_word(device),
                             "machine_class": records.machine_class(record, device),
                             "torch": record["torch"], "date": record["date"],
                             "verdict": decision["verdict"], "current": current,
                             "word": verdict_word(decision["verdict"]),
                             "figure": headline(decision), "this": record is self.record,
                             "source": self.source(record)})
        for release, run in self.compat_runs.items():
            entry = (run or {}).get("tips", {}).get(self.name)
            if not entry or entry.get("status") != compat.PASSED:
                continue
            current = compat.is_current(entry, version)
            for device, v in (entry.get("verdicts") or {}).items():
                rows.append({"device": records.device_word(device), "machine_class": compat.machine_class(run),
                             "torch": run.get("torch_build", release), "date": entry.get("date", ""),
                             "verdict": v.get("verdict"), "current": current,
                             "word": verdict_word(v.get("verdict")),
                             "figure": key_text(v.get("key")), "this": False,
                             "source": f"torch-version matrix, torch {release}"})
        # this build first, then grouped by device and machine class, newest first in a class
        rows.sort(key=lambda r: r["date"], reverse=True)
        rows.sort(key=lambda r: (not r["this"], r["device"], r["machine_class"]))
        return rows

    def measured_summary(self) -> list[str]:
        """One sentence per device, machine class and torch release with more than one run of
        this version of the tip that decided (a busy machine's run decided nothing): how many
        runs agree, and each run that does not (never one row for many). Two runs under the
        same conditions that disagree are both in the table above; this says so."""
        classes: dict[tuple[str, str, str], list[dict]] = {}
        for row in self.measured_on():
            if row["current"] and row["verdict"] not in NOT_DECIDED:
                release = str(row["torch"]).split("+", 1)[0]
                classes.setdefault((row["device"], row["machine_class"], release), []).append(row)
        out = []
        for (device, machine, release), runs in classes.items():
            if len(runs) < 2:
                continue
            verdicts = [r["verdict"] for r in runs]
            common = max(dict.fromkeys(verdicts), key=verdicts.count)
            where = f"{device}, {machine}, torch {release}"
            if verdicts.count(common) == len(runs):
                out.append(f"{where}: all {len(runs)} runs of this version say {common}.")
                continue
            others = "; ".join(f"{r['verdict']} ({r['date']}, {'this build' if r['this'] else r['source']})"
                               for r in runs if r["verdict"] != common)
            out.append(f"{where}: the {len(runs)} runs of this version disagree: "
                       f"{verdicts.count(common)} say {common}; the others: {others}. Both are "
                       "shown above with the figure that decided each; neither is preferred.")
        return out

    @property
    def rules(self) -> list:
        """The checker's rules this tip's evidence backs (its ``rules`` metadata)."""
        from tipsite.checker.registry import RULES

        return [RULES[code] for code in self.tip.rules if code in RULES]

    @property
    def name(self) -> str:
        return self.tip.name

    @property
    def statement(self) -> str:
        """The claim the verdicts judge, short: the seed claim's restatement, or the tip's own."""
        if self.claims:
            text = self.claims[0]["claim"]
        else:
            text = self.tip.statement or self.tip.title
        return text if len(text) <= CLAIM_MAX else text[: CLAIM_MAX - 1].rsplit(" ", 1)[0] + "…"

    @property
    def measured(self) -> list[DeviceView]:
        """The devices with a current verdict ("busy" is none: the machine was not free)."""
        return [d for d in self.devices.values() if d.state == "measured" and d.verdict != BUSY]

    @property
    def disagreement(self) -> str:
        """One sentence when the measured devices reach different verdicts, else ''."""
        seen = {d.word: d.verdict for d in self.measured}
        if len(set(seen.values())) < 2:
            return ""
        said = "; ".join(f"{v} on {w}" for w, v in seen.items())
        return (f"The devices disagree: {said}. Each verdict is decided from that device's own "
                "measurements; the figures below show where the effect differs.")

    @property
    def device_rules(self) -> list[tuple[str, str]]:
        """``[(device word, rule)]`` of each measured device whose record states a rule.

        A tip may word its rule for the device it ran on (the autocast dtype, say): a CUDA verdict
        from a recorded set is shown with the rule that CUDA run applied, not this build's."""
        return [(d.word, d.record["rule"]) for d in self.measured if d.record and d.record.get("rule")]

    @property
    def compat_anchor(self) -> str:
        return f"compat-{anchor_name(self.name)}"

    @property
    def all_devices(self) -> list[DeviceView]:
        """Every device of the vocabulary: the tip's own, then the others as "not applicable"."""
        own = list(self.devices.values())
        others = [DeviceView(d, "not applicable") for d in records.devices() if d not in self.devices]
        return own + others

    def card_classes(self) -> list[str]:
        """Facets the home page's filter reads: each device's own state and verdict together
        (``tc-d-cuda-older-tip-version-wrong``, ``tc-d-cpu-not-measured-none``: docutils keeps
        single hyphens only; the filter splits them by the known devices and states), so that
        "CUDA" with "holds" matches CUDA's verdict only; tags, devices, topic."""
        classes = ["tip-card", f"tc-topic-{self.tip.topic}"]
        classes += [f"tc-tag-{t}" for t in self.tip.tags] + [f"tc-device-{d}" for d in self.tip.devices]
        for d in self.all_devices:
            classes.append(f"tc-d-{d.device}-{d.state_token}-{d.verdict or 'none'}")
            if d.state != "not applicable":
                classes.append(f"tc-v-{d.device}-{d.token}")
        return list(dict.fromkeys(classes))

    def comparison_rows(self) -> list[dict[str, Any]]:
        """The figures table: one row per comparison (and per variant time), one cell per column."""
        rows: dict[tuple, dict] = {}
        for i, record in enumerate(self.columns):
            for device, decision in (record.get("verdicts") or {}).items():
                for c in decision.get("comparisons") or []:
                    unit = "x" if c["measure"] == "ratio" else c["unit"]
                    key = (device, c["name"])
                    row = rows.setdefault(key, {"label": c["name"], "device": device, "cells": {}})
                    median = quantity(c["median"], unit)
                    span = interval(c["low"], c["high"], unit)
                    text = (f"{median} [{span}], {len(c['ratios'])} rounds, "
                            f"{c['outcome']} {number(c['threshold'])}")
                    if c.get("margin") == "thin" and c["outcome"] != "noise":
                        text += " (thin margin: within 3% of the threshold)"
                    if c.get("bound") == "host":
                        decides = c in deciding_comparisons(decision)
                        text += (" (host-bound: the GPU idled most of the time"
                                 + (")" if decides else ", so this point does not decide the claim about GPU work)"))
                    row["cells"][i] = text
                    calibration = decision.get("calibration") or {}
                    for side, variant, samples in (("base", c["baseline"], c["base"]),
                                                   ("cand", c["candidate"], c["cand"])):
                        vkey = (device, c["name"], variant)
                        vrow = rows.setdefault(vkey, {"label": f"{variant} ({c['name']})",
                                                      "device": device, "cells": {}})
                        vrow["cells"][i] = _spread(samples, c["unit"]) + _gpu_text(c, side, samples, calibration)
            for m in record.get("measurements") or []:
                key = (m["device"], m["variant"], m["metric"])
                row = rows.setdefault(key, {"label": f"{m['variant']}: {m['metric']}",
                                            "device": m["device"], "cells": {}})
                spread = f" ± {quantity(m['spread'], m['unit'])}" if m.get("spread") is not None else ""
                warn = " (spread larger than the value)" if (m.get("spread") or 0) > abs(m["value"]) else ""
                row["cells"][i] = f"{quantity(m['value'], m['unit'])}{spread}{warn}"
        return list(rows.values())


def _figure(value: float, unit: str, name: str) -> str:
    """``7 nodes per step``, not ``7.00 nodes nodes per step``: a word unit the name already
    starts with is said once."""
    if unit and unit not in ("x",) and not unit[0].isdigit() and name.split(" ", 1)[0] == unit:
        return f"{number(value)} {name}"
    return f"{quantity(value, unit)} {name}".strip()


WIDEST = 2.0  # a headline never shows a figure whose interval's ends are further apart


def unsettled(low, high) -> bool:
    """Whether an interval is too wide for its figure to head a page: its high end more
    than :data:`WIDEST` times its low end (positive quantities: ratios, times, bytes)."""
    return (isinstance(low, (int, float)) and isinstance(high, (int, float))
            and 0 < low and WIDEST * low < high < float("inf"))


def key_text(key: dict | None) -> str:
    """A key figure in words: value, name, and its interval when the interval says something;
    a key whose interval spans more than :data:`WIDEST` times is shown without its value, as
    not settled, with the interval that says why."""
    if not key:
        return ""
    span = interval(key.get("low"), key.get("high"), key["unit"])
    low, high = key.get("low"), key.get("high")
    rounds = f", {key['rounds']} rounds" if key.get("rounds") else ""
    if unsettled(low, high):
        return (f"{key['name']}: not settled (interval {span}{rounds}: its ends are more "
                f"than {WIDEST:g}x apart)")
    text = _figure(key["value"], key["unit"], key["name"])
    if span and low is not None and high is not None and number(low) != number(high):
        text += f" (interval {span}{rounds})"
    return text


def deciding_comparisons(decision: dict) -> list[dict]:
    """The comparisons a verdict was decided from: tipkit's one rule (tipkit.judge)."""
    return tipkit.deciding_comparisons(decision)


def headline(decision: dict) -> str:
    """What decided the verdict, for the header and the cards: the reason for "inconclusive";
    for "depends" the two ends side by side (``1.22x with 1 element per row; 1x for an MLP``);
    otherwise the tip's key figure."""
    if decision.get("verdict") in ("inconclusive", "busy") and decision.get("why"):
        return str(decision["why"])
    if decision.get("verdict") == "depends":
        ranked = sorted((c for c in deciding_comparisons(decision) if c["measure"] == "ratio"),
                        key=lambda c: c["median"])
        wide = any(unsettled(c["low"], c["high"]) for c in ranked[:1] + ranked[-1:])
        if len(ranked) >= 2 and number(ranked[0]["median"]) != number(ranked[-1]["median"]) \
                and not wide:
            hi, lo = ranked[-1], ranked[0]
            return f"{quantity(hi['median'], 'x')} with {hi['name']}; {quantity(lo['median'], 'x')} with {lo['name']}"
    return key_text(decision.get("key"))


def _gpu_text(c: dict, side: str, samples: list[float], calibration: dict) -> str:
    """On a GPU: the time the GPU was busy per call beside the wall time, and the rate the stated
    work reached as a share of this GPU's calibrated limit (tipkit.compare_times, calibrate)."""
    import statistics

    from tipsite.sphinxext.render import CALIBRATION_WORDS, rate

    if "device_time" not in c:
        return ""
    busy, window = c["device_time"][side], c["window"][side]
    text = (f"; the GPU was busy {quantity(busy, 's')} of {quantity(window, 's')} a call "
            f"({number(100 * busy / window)}%)")
    if "kernels" in c and "profiled" in c:  # judged on the timed work, a profiled pass beside it
        text += (f", {c['kernels'][side]} GPU records in a profiled pass of "
                 f"{quantity(c['profiled'][side], 's')} a call")
    else:
        text += " (in a profiled pass)"
    work = c.get("work") or {}
    limit = c.get("calibrated") or calibration.get(work.get("limit"))
    amount = work.get("flops", work.get("bytes"))
    if amount and limit:
        per = "FLOP" if "flops" in work else "B"
        achieved = amount / statistics.median(samples)
        word = CALIBRATION_WORDS.get(work["limit"], (work["limit"], per))[0]
        text += f"; {rate(achieved, per)}, {number(100 * achieved / limit)}% of this GPU's measured {word}"
    return text


def _spread(samples: list[float], unit: str) -> str:
    import statistics

    median = statistics.median(samples)
    if len(samples) < 2:
        return quantity(median, unit)
    q = statistics.quantiles(samples, n=4) if len(samples) >= 4 else [min(samples), median, max(samples)]
    text = f"{quantity(median, unit)} (IQR {quantity(q[0], unit)} to {quantity(q[-1], unit)})"
    if q[-1] - q[0] > abs(median):
        text += " (spread larger than the value)"
    return text


def column_label(record: dict) -> str:
    """A figures-table column: which machine class and run it came from."""
    decided = list(record.get("verdicts") or {}) or ["cpu"]
    classes = "; ".join(f"{records.device_word(d)} {records.machine_class(record, d)}" for d in decided)
    return f"{classes}, torch {record['torch']}, {record['date']}"


def build_views(tips: list[tipmeta.Tip], out_dir: Path, sets: list[dict],
                related: dict[str, list[tipmeta.Tip]], apis: dict[str, list[str]],
                compat_runs: dict[str, dict | None] | None = None) -> dict[str, TipView]:
    """A view per tip, from the records on disk (this build's), the given result sets and the
    torch-version matrix's runs."""
    claims = tipmeta.claims()
    sources = tipmeta.sources()
    origins = {id(r): s["path"] for s in sets for r in s["records"]}
    views = {}
    for tip in tips:
        this = records.read_record(out_dir / tip.topic / tip.path.name)
        states = records.device_states(tip.name, tip.devices, records.tip_version(tip.path), this, sets)
        devices = {d: DeviceView(d, **s) for d, s in states.items()}
        tip_claims = [{**claims[c], "source": sources[c.split("-")[0]]} for c in tip.claims]
        views[tip.name] = TipView(tip=tip, record=this, devices=devices,
                                  columns=records.columns(tip.name, this, sets),
                                  related=related.get(tip.name, []), claims=tip_claims,
                                  apis=apis.get(tip.name, []), origins=origins,
                                  compat_runs=compat_runs or {})
    return views


def settings_repo_url() -> str | None:
    return settings.repo_url()
