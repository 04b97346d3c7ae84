// In-page filter for the tip cards (no server, no framework).
// Each card carries, per device of the vocabulary, its state and verdict together in one class:
// tc-d-<device>-<state>-<verdict> (tipsite/sphinxext/view.py, TipView.card_classes), e.g.
// tc-d-cuda-older-tip-version-wrong or tc-d-cpu-not-measured-none (split by the devices and
// states the bar's data-words name: docutils keeps single hyphens only); its tags as
// tc-tag-<t>. The device facets (device, verdict, state) are matched on ONE device at a time:
// "CUDA" + "holds" shows the tips whose CUDA verdict holds, not those holding on CPU; adding
// "older tip version" narrows to those whose CUDA holds comes from an older version of the tip.
// A device chosen alone shows the tips that run on it (any state but "not applicable"). Within a
// facet, pressed values are alternatives; facets narrow each other.
// The choice is mirrored in the URL (?device=cuda&verdict=holds) so a filtered view can be shared.
// A chip says what the rest of the site says: a state in its word (the bar's data-words, written
// from the one table, tipsite/sphinxext/vocabulary.py STATES), a device by its name ("CUDA"), a tag
// as the tag badges show it, with "#" before it.
(function () {
  "use strict";

  const FACETS = [["device", "Device"], ["verdict", "Verdict"], ["state", "Result"], ["tag", "Tag"]];
  const DEVICE_FACETS = ["device", "verdict", "state"];
  const CHIP_CLASS = { verdict: "tip-filter-verdict", state: "tip-filter-state",
    device: "tip-filter-device", tag: "tip-filter-tag" };

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
    // per card: [{device, state, verdict}] from its tc-d- classes, and its tags
    const DEVICES = Object.keys(words.device || {});
    const STATES = Object.keys(words.state || {}).sort((a, b) => b.length - a.length);
    function entryOf(cls) {
      const rest = cls.slice(5);
      const device = DEVICES.find((d) => rest.startsWith(d + "-"));
      if (!device) return null;
      const tail = rest.slice(device.length + 1);
      const state = STATES.find((s) => tail.startsWith(s + "-"));
      if (!state) return null;
      return { device, state, verdict: tail.slice(state.length + 1) };
    }
    const entries = new Map();
    const tags = new Map();
    cards.forEach((card) => {
      const own = [];
      const ownTags = new Set();
      card.classList.forEach((cls) => {
        const entry = cls.startsWith("tc-d-") ? entryOf(cls) : null;
        if (entry) {
          own.push(entry);
          values.device.add(entry.device);
          values.state.add(entry.state);
          if (entry.verdict !== "none") values.verdict.add(entry.verdict);
        } else if (cls.startsWith("tc-tag-")) {
          ownTags.add(cls.slice(7));
          values.tag.add(cls.slice(7));
        }
      });
      entries.set(card, own);
      tags.set(card, ownTags);
    });
    const order = (facet) => Object.keys(words[facet] || {});
    const sorted = (facet) => {
      const known = order(facet);
      return Array.from(values[facet]).sort((a, b) => {
        const ia = known.indexOf(a), ib = known.indexOf(b);
        return (ia < 0 ? 1e9 : ia) - (ib < 0 ? 1e9 : ib) || a.localeCompare(b);
      });
    };

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
      sorted(facet).forEach((value) => {
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

    function matches(card) {
      if (active.tag.size && !Array.from(active.tag).some((t) => tags.get(card).has(t))) return false;
      if (DEVICE_FACETS.every((f) => active[f].size === 0)) return true;
      // one device must satisfy every device facet pressed; a device alone: the tip runs there
      const anyState = active.state.size === 0 && active.verdict.size === 0;
      return entries.get(card).some((e) =>
        (active.device.size === 0 || active.device.has(e.device))
        && (active.verdict.size === 0 || active.verdict.has(e.verdict))
        && (active.state.size === 0 || active.state.has(e.state))
        && (!anyState || e.state !== "not-applicable"));
    }

    function apply() {
      let shown = 0;
      cards.forEach((card) => {
        const ok = matches(card);
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
