"""Render the site's reST from Jinja templates, with every value escaped unless marked as markup.

Pages are written by templates in ``templates/`` (one per thing a page shows), filled from a
:class:`~tipsite.sphinxext.view.TipView`. Values reach a template as plain data: the environment's
``finalize`` escapes each ``{{ value }}`` for reST (every punctuation character backslash-escaped,
line breaks collapsed), so text from a result set made on another machine can never become
markup (a role, a link, a ``raw`` directive). Markup built in Python, such as a role with a
computed verdict, is wrapped in :class:`Rst` and passes through as it is.

Numbers are formatted here, once: times and bytes pick a unit (``312 µs``, ``1.4 MiB``),
ratios read ``1.23x``, and no figure is printed in exponent notation.
"""

from __future__ import annotations

import math
import re
from functools import cache
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).with_name("templates")


class Rst(str):
    """reST markup made by the extension itself: a template inserts it unescaped."""


_PUNCT = re.compile(r"([\\`*_|\[\]<>:.\-+#=~^\"'(){}!?@$%&,;/])")


def esc(value) -> str:
    """``value`` as literal reST text: one line, every punctuation character escaped."""
    if isinstance(value, Rst):
        return value
    if value is None:
        return ""
    text = re.sub(r"\s+", " ", str(value))
    return _PUNCT.sub(r"\\\1", text)


def plain(value) -> Rst:
    """Trusted text inserted as it is: ids, docnames and URLs the extension checked itself."""
    return Rst("" if value is None else str(value))


def plain_line(value) -> Rst:
    """Text for a directive option (not inline-parsed): one line, no markup characters."""
    return Rst(re.sub(r"[`<>|*\\]", "", " ".join(str(value).split())))


def underline(title, char: str = "=") -> Rst:
    """A section underline as long as ``title`` once escaped (what docutils measures)."""
    return Rst(char * len(esc(title)))


def role(text: str, name: str) -> Rst:
    """``:name:`text``` with ``text`` made safe for a role's content (``{{ text|role("name") }}``)."""
    clean = re.sub(r"[`\\<>]", "", " ".join(str(text).split()))
    return Rst(f":{name}:`{clean}`")


def anchor_name(text: str) -> Rst:
    """A safe reST reference name, class name or HTML id fragment (letters, digits, '-')."""
    return Rst(re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "x")


def badge(verdict: str | None) -> Rst:
    """The verdict badge role, for one of the vocabulary's verdicts (anything else: none)."""
    from tipsite import records

    if verdict not in records.verdicts():
        return Rst("")
    return Rst(f":tip-verdict:`{verdict}`")


def finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def number(x: float, digits: int = 3) -> str:
    """``x`` with ``digits`` significant figures, never in exponent notation, and no trailing
    zeros: ``7``, not ``7.00`` (a count reads as a count)."""
    if not finite(x):
        return "–"
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - magnitude)
    text = f"{x:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def quantity(x: float, unit: str) -> str:
    """A value with its unit, scaled to a readable prefix for seconds and bytes."""
    if not finite(x):
        return "–"
    if unit in ("s", "us", "ms", "ns"):
        seconds = x * {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[unit]
        for factor, name in ((1, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
            if abs(seconds) >= factor or name == "ns":
                return f"{number(seconds / factor)} {name}"
    if unit in ("B", "bytes", "KiB", "MiB", "GiB"):
        value = x * {"B": 1, "bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]
        for factor, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"), (1, "B")):
            if abs(value) >= factor or name == "B":
                return f"{number(value / factor)} {name}"
    if unit == "x":
        return f"{number(x)}x"
    return f"{number(x)} {unit}".strip()


def rate(x: float, per: str) -> str:
    """``812 TFLOP/s`` or ``4.1 TB/s``: a rate with a decimal prefix (``per`` is FLOP or B)."""
    if not finite(x):
        return "–"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{number(x / factor)} {prefix}{per}/s"
    return f"{number(x)} {per}/s"


CALIBRATION_WORDS = {"matmul_float32": ("float32 matmul", "FLOP"), "matmul_float16": ("float16 matmul", "FLOP"),
                     "matmul_bfloat16": ("bfloat16 matmul", "FLOP"), "copy_device": ("device copy", "B"),
                     "copy_h2d_pinned": ("pinned host-to-device copy", "B"),
                     "copy_h2d_pageable": ("pageable host-to-device copy", "B")}


def calibration_text(calibration: dict) -> str:
    """A GPU's calibration (tipkit.calibrate) in words, for the provenance."""
    parts = []
    order = [*CALIBRATION_WORDS, "launch_s"]  # the same order on every page, whatever the file's
    for name, value in sorted(calibration.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order
                                                                      else len(order), kv[0])):
        if name in CALIBRATION_WORDS:
            word, per = CALIBRATION_WORDS[name]
            parts.append(f"{word} {rate(value, per)}")
        elif name == "launch_s":
            parts.append(f"kernel launch {quantity(value, 's')} of host time")
        else:
            parts.append(f"{name} {number(value)}")
    return "; ".join(parts)


def interval(low, high, unit: str) -> str:
    if not (finite(low) and finite(high)):
        return ""
    if unit == "x":
        return f"{number(low)}–{number(high)}x"
    return f"{quantity(low, unit)} to {quantity(high, unit)}"


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        finalize=esc,
        autoescape=False,
        undefined=jinja2.StrictUndefined,
        trim_blocks=False,  # a line ending in a block tag keeps its line break
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(quantity=quantity, number=number, interval=interval, role=role,
                       anchor=anchor_name, badge=badge, esc=esc, plain=plain,
                       plain_line=plain_line, underline=underline)
    return env


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)


def source_fingerprint() -> str:
    """Changes whenever the templates change (part of the page layer's fingerprint)."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(TEMPLATES.rglob("*")):
        if path.is_file():
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()
