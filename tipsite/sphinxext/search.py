"""Search: the words that tie a tip's page to what readers type.

* :func:`search_keywords` and :func:`subject_keywords` give each tip page its index entries
  (rendered by the header template): Sphinx's search ranks a page's main entries above plain text
  matches, so a reader typing an API name or a problem the tip names finds it first.
* :func:`keep_index_entries` keeps those entries in the search index across incremental builds
  (Sphinx 9.0 drops the entries of pages it does not rewrite).
"""

from __future__ import annotations

import re

from docutils import nodes
from sphinx.application import Sphinx

from tipsite import tipmeta

_API_URL_RE = re.compile(r"/generated/((?:torch|numpy)[\w.]*?)(?:\.html|#|$)")


def api_names(tip: tipmeta.Tip) -> list[str]:
    """Dotted API names the tip is about: its ``torch.*`` keywords and documentation pages."""
    names = [k for k in tip.keywords if re.fullmatch(r"torch(\.\w+)+", k)]
    for url in tip.docs:
        m = _API_URL_RE.search(url)
        if m:
            names.append(m.group(1))
    return list(dict.fromkeys(names))


def search_keywords(tip: tipmeta.Tip) -> list[str]:
    """Words the search index should tie to the tip's page: its keywords and API names.

    They become *main* index entries on the tip's page, which Sphinx's search ranks above
    plain text matches: a reader typing an API name or a problem the tip names finds it first.
    """
    words: dict[str, str] = {}
    for word in (*tip.keywords, *api_names(tip)):
        # "," separates entries and ";" sub-entries in an index directive; "!" marks main ones.
        clean = re.sub(r"[,;]+", " ", word).strip().lstrip("!").strip()
        if clean:
            words.setdefault(clean.lower(), clean)
    return list(words.values())


def _words(text: str) -> str:
    """Lower case, punctuation as spaces: ``torch.inference_mode()`` -> `` torch inference mode ``."""
    return " " + " ".join(re.split(r"[^0-9a-z]+", text.lower())).strip() + " "


def subject_keywords(tip: tipmeta.Tip) -> set[str]:
    """The keywords naming what the tip is about, rather than what it mentions on the way.

    The first keyword is the tip's subject by the contract's convention; any other keyword
    counts when the tip's title, its takeaway, or a claim it examines (as restated and as quoted
    in conf/claims.toml) names it. Search ranks the tip first for these; it lists the tip
    after the other results for the rest (they stay in the general index too).
    """
    keywords = search_keywords(tip)
    claims = tipmeta.claims()
    told = _words(" ".join([tip.title, tip.takeaway,
                            *(claims[c]["claim"] + " " + claims[c]["quote"] for c in tip.claims)]))
    subject = set(keywords[:1])
    subject |= {k for k in keywords if _words(k).strip() and _words(k) in told}
    return subject


def keep_index_entries(app: Sphinx, doctree: nodes.document) -> None:
    """doctree-read: record the page's index entries in the environment as it is read.

    Sphinx 9.0's search index takes index entries only from the pages it writes in this build,
    and the environment is saved before that: after an incremental build, the unchanged pages'
    entries (the tips' search keywords) would be missing from searchindex.js. Stored at read
    time, in the very dict the search index uses, they are saved with the environment.
    """
    store = getattr(app.env, "_search_index_index_entries", None)
    if not isinstance(store, dict):
        return
    from sphinx import addnodes
    from sphinx.util.index_entries import split_index_msg

    found: set[tuple[str, str, str]] = set()
    for node in doctree.findall(addnodes.index):
        for entry_type, value, target_id, main, *_ in node["entries"]:
            try:
                parts = split_index_msg(entry_type, value)
            except ValueError:
                continue
            found |= {(part, target_id or "", main) for part in parts}
    if found:
        store[app.env.docname] = sorted(found)
    else:
        store.pop(app.env.docname, None)


def forget_index_entries(app: Sphinx, env, docname: str) -> None:
    store = getattr(env, "_search_index_index_entries", None)
    if isinstance(store, dict):
        store.pop(docname, None)


def merge_index_entries(app: Sphinx, env, docnames: set[str], other) -> None:
    """env-merge-info: bring the entries read by a parallel reader (-j N) back."""
    store = getattr(env, "_search_index_index_entries", None)
    theirs = getattr(other, "_search_index_index_entries", None)
    if isinstance(store, dict) and isinstance(theirs, dict):
        store.update({d: theirs[d] for d in docnames if d in theirs})
