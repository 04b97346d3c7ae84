"""Sphinx extension: the ``tips-coverage`` directive renders what practitioners ask and the tips
that answer it (``conf/coverage.toml``): each recommendation of the Performance Tuning Guide, the
questions readers typed and today's common advice, with its tips and their verdicts on each
device, or the reason no tip can run here. Rendered through ``templates/coverage.rst.jinja``.

The page is read again by every build (its verdicts come from this build's views)."""

from __future__ import annotations

import tomllib

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

from conf import settings
from tipsite.sphinxext import state
from tipsite.sphinxext.render import Rst, badge, render

DATA = settings.CONF_DIR / "coverage.toml"
DOCNAME = "reference/coverage"


def load() -> list[dict]:
    return tomllib.loads(DATA.read_text(encoding="utf-8"))["group"]


class Coverage(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        self.env.note_dependency(str(DATA))
        tips = {t.name: t for t in state.tips(self.env.app)}
        views = state.views(self.env.app)
        groups = []
        for group in load():
            items = []
            for item in group["item"]:
                shown = []
                for name in item.get("tips", []):
                    tip = tips.get(name)
                    if tip is None:
                        raise self.error(f"{DATA}: {item['name']!r} names {name!r}, which is not a tip")
                    view = views.get(name)
                    verdicts = [{"word": d.word, "badge": badge(d.verdict) if d.state == "measured" else None,
                                 "label": d.label} for d in (view.devices.values() if view else [])]
                    shown.append({"doc": Rst(f":doc:`/{tip.docname}`"), "verdicts": verdicts})
                items.append({"name": item["name"], "tips": shown, "why": item.get("why"),
                              "note": item.get("note")})
            groups.append({"title": group["title"], "about": group.get("about", ""), "items": items})
        text = render("coverage.rst.jinja", groups=groups)
        container = nodes.container(classes=["tips-coverage"])
        self.state.nested_parse(StringList(text.splitlines(), source="tips-coverage"), self.content_offset,
                                container)
        return [container]


def read_every_build(app, env, added, changed, removed) -> list[str]:
    """env-get-outdated: the verdicts it shows are this build's."""
    return [DOCNAME] if DOCNAME in env.found_docs and DOCNAME not in added else []
