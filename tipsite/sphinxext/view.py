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
from tipsite import devices, records, tipmeta
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


# One word per state of a device on a tip, defined here and used by the header, the cards, the
# filter chips, the search results and the thumbnails: "measured" shows the verdict itself.
STATE_WORDS = {"measured": "measured", "stale": "older version", "not measured": "not measured"}
# The same states as tokens for CSS classes and search metadata.
STATE_TOKENS = {"measured": "measured", "stale": "older-version", "not measured": "not-measured"}


def state_word(state: str) -> str:
    return STATE_WORDS[state]


def state_token(state: str, verdict: str | None = None) -> str:
    """``holds`` for a measured verdict, ``older-version`` or ``not-measured`` otherwise."""
    return verdict if state == "measured" and verdict else STATE_TOKENS[state]


@dataclass
class DeviceView:
    device: str
    state: str  # "measured" | "stale" | "not measured" (STATE_WORDS says how readers see each)
    decision: dict | None = None
    record: dict | None = None
    origin: str | None = None

    @property
    def word(self) -> str:
        return records.device_word(self.device)

    @property
    def verdict(self) -> str | None:
        return self.decision["verdict"] if self.decision else None

    @property
    def token(self) -> str:
        """The verdict when measured, else the state's token (``older-version``, ``not-measured``)."""
        return state_token(self.state, self.verdict)

    @property
    def label(self) -> str:
        """What every place shows for this device: ``holds``, ``holds, older version`` or
        ``not measured``."""
        if self.state == "measured":
            return str(self.verdict)
        if self.state == "stale":
            return f"{self.verdict}, {STATE_WORDS['stale']}"
        return STATE_WORDS["not measured"]

    @property
    def legacy(self) -> bool:
        return bool(self.decision and self.decision.get("legacy"))

    @property
    def key_text(self) -> str:
        """``1.8x speed-up at width 4 (interval 1.6–2.0x, 12 rounds)``."""
        key = (self.decision or {}).get("key")
        if not key:
            return ""
        text = f"{quantity(key['value'], key['unit'])} {key['name']}"
        span = interval(key.get("low"), key.get("high"), key["unit"])
        if span and (key.get("low") != key.get("high")):
            rounds = f", {key['rounds']} rounds" if key.get("rounds") else ""
            text += f" (interval {span}{rounds})"
        return text

    @property
    def where(self) -> str:
        """``AMD EPYC, AVX2, 1 thread, torch 2.13.0+cpu`` or ``NVIDIA H100, CUDA 13.0, driver 580``."""
        if not self.record:
            return ""
        host = self.record["hosts"].get(self.device, {})
        parts = [host.get("name") or "unknown machine"]
        if self.device in devices.DEVICES:
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
        return [d for d in self.devices.values() if d.state == "measured"]

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

    def card_classes(self) -> list[str]:
        """Facets the home page's filter reads: per-device verdicts, tags, devices, topic."""
        classes = ["tip-card", f"tc-topic-{self.tip.topic}"]
        classes += [f"tc-tag-{t}" for t in self.tip.tags] + [f"tc-device-{d}" for d in self.tip.devices]
        for d in self.devices.values():
            classes += [f"tc-v-{d.device}-{d.token}", f"tc-verdict-{d.token}"]
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
                    row["cells"][i] = (f"{median} [{span}], {len(c['ratios'])} rounds, "
                                       f"{c['outcome']} {number(c['threshold'])}")
                    for variant, samples in ((c["baseline"], c["base"]), (c["candidate"], c["cand"])):
                        vkey = (device, c["name"], variant)
                        vrow = rows.setdefault(vkey, {"label": f"{variant} ({c['name']})",
                                                      "device": device, "cells": {}})
                        vrow["cells"][i] = _spread(samples, c["unit"])
            for m in record.get("measurements") or []:
                key = (m["device"], m["variant"], m["metric"])
                row = rows.setdefault(key, {"label": f"{m['variant']}: {m['metric']}",
                                            "device": m["device"], "cells": {}})
                spread = f" ± {quantity(m['spread'], m['unit'])}" if m.get("spread") is not None else ""
                warn = " (spread larger than the value)" if (m.get("spread") or 0) > abs(m["value"]) else ""
                row["cells"][i] = f"{quantity(m['value'], m['unit'])}{spread}{warn}"
        return list(rows.values())


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
    """A figures-table column: which machine and run it came from."""
    hosts = record["hosts"]
    devices = ", ".join(records.device_word(d) for d in (record.get("verdicts") or {})) or "no device"
    names = "; ".join(hosts[d]["name"] for d in (record.get("verdicts") or {}) if d in hosts)
    return f"{devices}: {names or hosts['cpu']['name']}, torch {record['torch']}, {record['date']}"


def build_views(tips: list[tipmeta.Tip], out_dir: Path, sets: list[dict],
                related: dict[str, list[tipmeta.Tip]], apis: dict[str, list[str]]) -> dict[str, TipView]:
    """A view per tip, from the records on disk (this build's) and the given result sets."""
    claims = tipmeta.claims()
    sources = tipmeta.sources()
    views = {}
    for tip in tips:
        this = records.read_record(out_dir / tip.topic / tip.path.name)
        states = records.device_states(tip.name, tip.devices, records.tip_version(tip.path), this, sets)
        devices = {d: DeviceView(d, **s) for d, s in states.items()}
        tip_claims = [{**claims[c], "source": sources[c.split("-")[0]]} for c in tip.claims]
        views[tip.name] = TipView(tip=tip, record=this, devices=devices,
                                  columns=records.columns(tip.name, this, sets),
                                  related=related.get(tip.name, []), claims=tip_claims,
                                  apis=apis.get(tip.name, []))
    return views


def settings_repo_url() -> str | None:
    return settings.repo_url()
