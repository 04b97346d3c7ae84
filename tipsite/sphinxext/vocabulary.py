"""The one table of a device's states on a tip, and the words every page shows for them.

Imported by :mod:`.state`, :mod:`.view`, :mod:`.cards` and :mod:`.pages`; imports nothing of the
site's, so no module reaches it through an import circle.
"""

from __future__ import annotations

# --- the one table of a device's states on a tip ---------------------------------------------------
#
# What every page, card, chip, search result, thumbnail and "How this site is built" calls each
# state of a device on a tip. Keys are the states :func:`tipsite.records.device_states` returns
# ("measured", "stale", "not measured"), plus "not applicable" (a device the tip does not run on).
# ``word``: the reader's word (a measured state shows its verdict instead); ``token``: its
# spelling in CSS classes, filter values and search metadata; ``meaning``: one sentence for the
# page that explains the site (the ``tips-states`` directive renders this table there).
STATES: dict[str, dict[str, str]] = {
    "measured": {
        "word": "current", "token": "current",
        "meaning": "The newest run of the tip's current code on this device decided this verdict.",
    },
    "stale": {
        "word": "older tip version", "token": "older-tip-version",
        "meaning": "Only an older version of the tip's code ran on this device; its verdict and "
                   "date are shown, named so, until the current code runs there.",
    },
    "not measured": {
        "word": "not measured", "token": "not-measured",
        "meaning": "The tip runs on this device, but no run of it there decided a verdict yet "
                   "(or the machine was busy: not measured: machine busy).",
    },
    "not applicable": {
        "word": "not applicable", "token": "not-applicable",
        "meaning": "The tip does not run on this device: its claim is not about it.",
    },
}
# A run whose deciding comparisons found the machine busy (tipkit's verdict "busy") decides
# nothing: the device reads "not measured: machine busy".
BUSY = "busy"
BUSY_WORD = "machine busy"


def state_word(state: str) -> str:
    return STATES[state]["word"]


def state_words() -> dict[str, str]:
    """The states' words by their key, for the templates: ``words.stale``, ``words.not_measured``."""
    return {k.replace(" ", "_"): v["word"] for k, v in STATES.items()}
