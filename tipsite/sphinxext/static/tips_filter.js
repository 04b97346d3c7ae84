// In-page filter for the tip cards (no server, no framework).
// Each card carries its facets as classes: tc-verdict-<v>, tc-tag-<t>, tc-device-<d>. A card is
// shown when, in every facet with a chip pressed, it has at least one of the pressed values.
// The choice is mirrored in the URL (?tag=autograd&verdict=holds) so a filtered view can be shared.
// A chip says what the rest of the site says: a state in its one word (the bar's data-words,
// written from tipsite/sphinxext/view.py: "older-version" reads "older version"), a device by its
// name ("CUDA", in the device badges' dashed outline), a tag as the tag badges show it, with "#"
// before it: the device CUDA and the tag #cuda are never two alike "cuda" chips.
(function () {
  "use strict";

  const FACETS = [["verdict", "Verdict"], ["device", "Measured on"], ["tag", "Tag"]];
  const CHIP_CLASS = { verdict: "tip-filter-verdict", device: "tip-filter-device", tag: "tip-filter-tag" };

  function init() {
    const bar = document.getElementById("tip-filter");
    if (!bar) return;
    const cards = Array.from(document.querySelectorAll(".tip-card"));
    let words = {};
    try { words = JSON.parse(bar.dataset.words || "{}"); } catch (e) { words = {}; }
    const chipText = (facet, value) => {
      const word = (words[facet] || {})[value] || value;
      return facet === "tag" ? `#${word}` : word;
    };
    const values = {};
    const active = {};
    FACETS.forEach(([facet]) => { values[facet] = new Set(); active[facet] = new Set(); });
    cards.forEach((card) => card.classList.forEach((cls) => {
      const m = cls.match(/^tc-(verdict|tag|device)-(.+)$/);
      if (m) values[m[1]].add(m[2]);
    }));

    const params = new URLSearchParams(window.location.search);
    FACETS.forEach(([facet]) => params.getAll(facet).forEach((v) => {
      if (values[facet].has(v)) active[facet].add(v);
    }));

    const count = document.createElement("p");
    count.className = "tip-filter-count";
    count.setAttribute("aria-live", "polite");

    const chips = [];
    FACETS.forEach(([facet, label]) => {
      if (values[facet].size === 0) return;
      const row = document.createElement("div");
      row.className = "tip-filter-group";
      row.setAttribute("role", "group");
      row.setAttribute("aria-label", label);
      const name = document.createElement("span");
      name.className = "tip-filter-label";
      name.textContent = label + ":";
      row.appendChild(name);
      Array.from(values[facet]).sort().forEach((value) => {
        const chip = document.createElement("button");
        chip.type = "button";
        chip.className = `tip-filter-chip ${CHIP_CLASS[facet]}`;
        chip.dataset.facet = facet;
        chip.dataset.value = value;
        chip.textContent = chipText(facet, value);
        chip.setAttribute("aria-label", `${label}: ${chipText(facet, value)}`);
        chip.addEventListener("click", () => {
          if (active[facet].has(value)) active[facet].delete(value);
          else active[facet].add(value);
          apply();
        });
        chips.push(chip);
        row.appendChild(chip);
      });
      bar.appendChild(row);
    });

    const clear = document.createElement("button");
    clear.type = "button";
    clear.className = "tip-filter-clear";
    clear.textContent = "Show all";
    clear.addEventListener("click", () => {
      FACETS.forEach(([facet]) => active[facet].clear());
      apply();
    });
    const foot = document.createElement("div");
    foot.className = "tip-filter-foot";
    foot.appendChild(count);
    foot.appendChild(clear);
    bar.appendChild(foot);

    function apply() {
      let shown = 0;
      cards.forEach((card) => {
        const ok = FACETS.every(([facet]) => active[facet].size === 0
          || Array.from(active[facet]).some((v) => card.classList.contains(`tc-${facet}-${v}`)));
        card.hidden = !ok;
        if (ok) shown += 1;
      });
      chips.forEach((chip) => chip.setAttribute(
        "aria-pressed", String(active[chip.dataset.facet].has(chip.dataset.value))));
      count.textContent = `Showing ${shown} of ${cards.length} tips`;
      clear.disabled = shown === cards.length;
      const url = new URL(window.location.href);
      FACETS.forEach(([facet]) => {
        url.searchParams.delete(facet);
        active[facet].forEach((v) => url.searchParams.append(facet, v));
      });
      window.history.replaceState(null, "", url);
    }

    bar.hidden = false;
    apply();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
