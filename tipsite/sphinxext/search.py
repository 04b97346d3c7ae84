"""Search: the words that tie a tip's page to what readers type.

The site's search is Pagefind (:mod:`.pagefind`), which indexes the built HTML. This module
decides what a tip page tells it beyond its visible text:

* :func:`search_keywords`: the tip's search words: its ``sphinx_gallery_tips_keywords``, the API
  names of its documentation links, and the readers' words of ``conf/search.toml`` whose phrase
  the tip names (``"out of memory"`` brings ``OOM``). The header template renders them, hidden,
  as weighted page text and as the page's Pagefind metadata ``keywords``, whose matches the
  ranking boosts (``conf/search.toml``, ``[ranking]``);
* :func:`browser_config`: what the search script needs in the browser (the question words it
  drops from a query, the ranking weights, the devices' names);
* :func:`outdate_on_change`: a changed ``conf/search.toml`` re-reads the tip pages.
"""

from __future__ import annotations

import functools
import json
import re
import tomllib

from sphinx.application import Sphinx

from conf import settings
from tipsite import build, tipmeta
from tipsite.sphinxext import view

CONFIG = settings.CONF_DIR / "search.toml"


@functools.cache
def config() -> dict:
    data = tomllib.loads(CONFIG.read_text(encoding="utf-8"))
    problems = [f"{key} is missing" for key in ("pages", "exclude", "ignore", "synonyms", "ranking")
                if key not in data]
    for phrase, words in data.get("synonyms", {}).items():
        if not isinstance(words, list) or not all(isinstance(w, str) and w.strip() for w in words):
            problems.append(f"synonyms[{phrase!r}] must be a list of words")
    if problems:
        raise ValueError(f"{CONFIG}: " + "; ".join(problems))
    return data


def _words(text: str) -> str:
    """Lower case, punctuation as spaces: ``torch.inference_mode()`` -> `` torch inference mode ``."""
    return " " + " ".join(re.split(r"[^0-9a-z]+", text.lower())).strip() + " "


def readers_words(tip: tipmeta.Tip, named: list[str]) -> list[str]:
    """The synonyms whose phrase the tip names (title, claims, takeaway, ``named``, tags, kind)."""
    claims = tipmeta.claims()
    told = _words(" ".join([tip.title, tip.takeaway, tip.statement or "", tip.kind, *tip.tags, *named,
                            *(claims[c]["claim"] + " " + claims[c]["quote"] for c in tip.claims if c in claims)]))
    found = []
    for phrase, words in config()["synonyms"].items():
        if _words(phrase).strip() and _words(phrase) in told:
            found += words
    return found


def search_keywords(tip: tipmeta.Tip) -> list[str]:
    """The tip's search words: its keywords, API names and readers' words, each once."""
    own = [*tip.keywords, *view.api_names(tip)]
    words: dict[str, str] = {}
    for word in (*own, *readers_words(tip, own)):
        clean = " ".join(word.split())
        if clean:
            words.setdefault(clean.lower(), clean)
    return list(words.values())


def subject_keywords(tip: tipmeta.Tip) -> set[str]:
    """No longer used by the templates (Sphinx's index entries are gone); pages.py still imports it."""
    return set(search_keywords(tip)[:1])


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FRAME = re.compile(r'File "[^"]*", line \d+(, in \S+)?')
_URL = re.compile(r"https?://\S+")
_PATH = re.compile(r"\S*[/\\]\S*")
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b")
_DEVICE_INDEX = re.compile(r"\b(cuda|xpu|mps|npu|hpu|cpu|meta):\d+\b", re.I)
_NUMBER = re.compile(r"\b\d+(\.\d+)?([eE][-+]?\d+)?\s*(TiB|GiB|MiB|KiB|GB|MB|KB|bytes|B|ms|us|s)?\b")


def paste_stop_words() -> set[str]:
    data = config()
    paste = data.get("paste", {})
    return {w.lower() for w in (*data["ignore"], *paste.get("stop", ()), *paste.get("generic", ()))}


def pasted_words(text: str) -> str:
    """An error or warning line as the search keeps it (``tips_search.js``, ``pastedTerms``:
    the two must agree): no paths, URLs, addresses, numbers, sizes or device indices, no word
    every message has; lower case, each word once.

    ``RuntimeError: Expected all tensors to be on the same device, but found at least two
    devices, cuda:0 and cpu!`` -> ``expected tensors same device devices cuda cpu``."""
    t = _ANSI.sub(" ", text)
    t = _FRAME.sub(" ", t)
    t = _URL.sub(" ", t)
    t = _PATH.sub(" ", t)
    t = _HEX.sub(" ", t)
    t = _DEVICE_INDEX.sub(r"\1", t)
    t = _NUMBER.sub(" ", t)
    stop = paste_stop_words()
    words: list[str] = []
    for raw in re.split(r"[\W_]+", t):
        w = raw.lower()
        if len(w) < 2 or w.isdigit() or w in stop or w in words:
            continue
        words.append(w)
    return " ".join(words)


def browser_config() -> dict:
    from tipsite import records

    data = config()
    paste = data.get("paste", {})
    return {"ignore": sorted({w.lower() for w in data["ignore"]}),
            "paste": {"stop": sorted({w.lower() for w in paste.get("stop", ())}),
                      "generic": sorted({w.lower() for w in paste.get("generic", ())})},
            "metaWeights": dict(data["ranking"].get("meta_weights", {})),
            "devices": {d: records.device_word(d) for d in tipmeta.vocab()["devices"]}}


def browser_script() -> str:
    """The inline script that hands :func:`browser_config` to ``tips_search.js``."""
    return "window.TIPS_SEARCH = " + json.dumps(browser_config(), sort_keys=True) + ";"


def outdate_on_change(app: Sphinx, env, added, changed, removed) -> list[str]:
    """env-get-outdated: the tip pages carry the search words, so a changed config re-reads them."""
    new = build.digest([CONFIG])
    if getattr(env, "tips_search_config_fp", None) == new:
        return []
    env.tips_search_config_fp = new
    config.cache_clear()
    from tipsite.sphinxext import state

    return sorted(d for d in env.found_docs - set(added) if state.tip_for_doc(app, d) is not None)
