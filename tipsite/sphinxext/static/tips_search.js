// Site search: Pagefind's index of the built pages (tipsite/sphinxext/pagefind.py), shown as you
// type in furo's search box. Results list one entry per page: for a tip its verdict per device,
// the claim it judges and its takeaway; filters by verdict, device and tag sit above them. Enter
// still opens the search page (search.html?q=...), which shows the same results in the page.
// Everything comes from the built site (_static/pagefind/); nothing is fetched from elsewhere.
// Opened from the disk (file://), a browser refuses to load the index: the box then falls back to
// Sphinx's own search page, which works there.
(function () {
  "use strict";

  const script = document.currentScript;
  const config = window.TIPS_SEARCH || { ignore: [], metaWeights: {}, devices: {}, paste: {} };
  const IGNORE = new Set(config.ignore);
  const PASTE = config.paste || {};
  const PASTE_STOP = new Set([...config.ignore, ...(PASTE.stop || []), ...(PASTE.generic || [])]);
  const DEBOUNCE_MS = 60;

  // "Why is my DataLoader so slow?" -> "dataloader so slow": Pagefind returns the pages holding
  // every word of a query, so question words no page is about are dropped first.
  function queryTerms(text) {
    const words = text.trim().split(/\s+/).filter(Boolean);
    const kept = words.filter((w) => !IGNORE.has(w.toLowerCase().replace(/[^\p{L}\p{N}]+/gu, "")));
    return (kept.length ? kept : words).join(" ");
  }

  // A line pasted from a traceback or a warning ("RuntimeError: Expected all tensors to be on
  // the same device, but found at least two devices, cuda:0 and cpu!"): what differs from one
  // run to the next goes (paths, URLs, addresses, numbers and sizes, device indices), then the
  // words every message has ("error", "but", "found"...). Tips declare the lines they explain
  // and the search indexes them the same way (tipsite/sphinxext/search.py, pasted_words: keep
  // the two in step).
  function looksPasted(text) {
    return /^\s*([\w.]*(Error|Warning|Exception)\b|\w+ error:)/.test(text) || text.length > 80
      || /https?:\/\/|0x[0-9a-fA-F]{4,}|\b(cuda|xpu|mps|npu|hpu):\d/.test(text);
  }

  function pastedTerms(text) {
    let t = text.replace(/\x1b\[[0-9;]*m/g, " ");
    t = t.replace(/File "[^"]*", line \d+(, in \S+)?/g, " ");
    t = t.replace(/https?:\/\/\S+/g, " ");
    t = t.replace(/\S*[\/\\]\S*/g, " ");
    t = t.replace(/\b0x[0-9a-fA-F]+\b/g, " ");
    t = t.replace(/\b(cuda|xpu|mps|npu|hpu|cpu|meta):\d+\b/gi, "$1");
    t = t.replace(/\b\d+(\.\d+)?([eE][-+]?\d+)?\s*(TiB|GiB|MiB|KiB|GB|MB|KB|bytes|B|ms|us|s)?\b/g, " ");
    const seen = new Set();
    const words = [];
    for (const raw of t.split(/[^\p{L}\p{N}]+/u)) {
      const w = raw.toLowerCase();
      if (w.length < 2 || /^\d+$/.test(w) || PASTE_STOP.has(w) || seen.has(w)) continue;
      seen.add(w);
      words.push(w);
    }
    return words.join(" ");
  }

  // For scripts and tests: the words a query becomes.
  window.TipsSearchQuery = { queryTerms, pastedTerms, looksPasted };

  function verdictBadges() {
    // Per device (tip_header.rst.jinja): meta.verdict_<device> is the state's token (a verdict,
    // "older-version" or "not-measured"), the badge's class; meta.state_<device> its words as
    // every page shows them ("holds", "holds, older version", "not measured").
    return Object.entries(config.devices).map(([device, word]) => {
      const v = `meta.verdict_${device}`;
      const s = `meta.state_${device}`;
      return `{{#if ${v}}}<span class="tips-result-device">${word} `
        + `<span class="tip-verdict tip-verdict-{{ ${v} }}">{{ ${s} }}</span></span>{{/if}}`;
    }).join("");
  }

  const RESULT_TEMPLATE = `
<li class="tips-result">
  <a class="tips-result-link" href="{{ meta.url | default(url) | safeUrl }}">
    <span class="tips-result-title">{{ meta.title | default("Untitled") }}</span>
    {{#if meta.claim}}
    <span class="tips-result-verdicts">${verdictBadges()}</span>
    <span class="tips-result-claim">Claim: “{{ meta.claim }}”</span>
    <span class="tips-result-takeaway">{{ meta.takeaway }}</span>
    {{/if}}
    {{#if not(meta.claim)}}<span class="tips-result-excerpt">{{+ excerpt +}}</span>{{/if}}
  </a>
</li>`;

  // One filter per device (its own state there: "holds", "holds, older tip version", "not
  // measured", "not applicable"; tip_header.rst.jinja), then the tags.
  const FILTERS = [...Object.entries(config.devices), ["tag", "Tag"]];

  function bundleUrl() {
    return new URL("pagefind/", script ? script.src : window.location.href).href;
  }

  function siteRoot() {
    // Sphinx writes the relative path to the site's root on <html data-content_root="../../">.
    const root = document.documentElement.dataset.content_root || "./";
    return new URL(root, window.location.href).pathname;
  }

  let loading = null;
  function loadUi() {
    if (!loading) {
      loading = new Promise((resolve, reject) => {
        const css = document.createElement("link");
        css.rel = "stylesheet";
        css.href = bundleUrl() + "pagefind-component-ui.css";
        document.head.appendChild(css);
        const ui = document.createElement("script");
        ui.type = "module";
        ui.src = bundleUrl() + "pagefind-component-ui.js";
        ui.onload = () => {
          const components = window.PagefindComponents;
          if (!components) { reject(new Error("Pagefind's component UI did not start")); return; }
          components.configureInstance("default", {
            bundlePath: bundleUrl(),
            baseUrl: siteRoot(),
            excerptLength: 24,
            ranking: { metaWeights: config.metaWeights },
          });
          resolve(components.getInstanceManager().getInstance("default"));
        };
        ui.onerror = () => reject(new Error("Pagefind's component UI could not be loaded"));
        document.head.appendChild(ui);
      });
    }
    return loading;
  }

  function makePanel(inline) {
    const panel = document.createElement("div");
    panel.className = "tips-search-panel" + (inline ? " tips-search-inline" : " tips-search-popup");
    panel.id = "tips-search-panel";
    panel.setAttribute("role", "region");
    panel.setAttribute("aria-label", "Search results");
    panel.innerHTML = `
<div class="tips-search-bar">
  <pagefind-summary></pagefind-summary>
  ${inline ? "" : '<button type="button" class="tips-search-close" aria-label="Close the search results">×</button>'}
</div>
<div class="tips-search-filters">
  ${FILTERS.map(([f, label]) => `<pagefind-filter-dropdown filter="${f}" label="${label}" hide-clear></pagefind-filter-dropdown>`).join("")}
</div>
<pagefind-results hide-sub-results><script type="text/pagefind-template">${RESULT_TEMPLATE}</` + `script></pagefind-results>`;
    return panel;
  }

  // Pagefind's filter dropdowns open from a button with role "combobox", which takes no name from
  // its text: it is named only while a filter is chosen ("Verdict, 1 filter selected"), and a
  // screen reader met three unnamed buttons (axe-core: critical "button-name"). Each gets its
  // label ("Verdict") whenever Pagefind leaves it without one.
  function nameFilterButtons(panel) {
    const name = () => panel.querySelectorAll(".pf-dropdown-trigger:not([aria-label])").forEach((button) => {
      const label = button.querySelector(".pf-dropdown-trigger-label");
      const dropdown = button.closest("pagefind-filter-dropdown");
      const text = (label && label.textContent.trim()) || (dropdown && dropdown.getAttribute("label"));
      if (text) button.setAttribute("aria-label", text);
    });
    new MutationObserver(name).observe(panel, {
      subtree: true, childList: true, attributes: true, attributeFilter: ["aria-label"] });
    name();
  }

  function init() {
    if (window.location.protocol === "file:") return; // Sphinx's search page answers instead
    const boxes = Array.from(document.querySelectorAll("input.sidebar-search"));
    const sphinxResults = document.getElementById("search-results");
    const onSearchPage = Boolean(sphinxResults);
    let panel = null;
    let instance = null;
    let timer = null;
    let box = boxes[0] || null;
    let asked = "";

    async function ensurePanel() {
      instance = await loadUi();
      if (panel) return panel;
      panel = makePanel(onSearchPage);
      nameFilterButtons(panel);
      if (onSearchPage) {
        sphinxResults.hidden = true;
        sphinxResults.before(panel);
      } else {
        panel.hidden = true;
        document.body.appendChild(panel);
        panel.querySelector(".tips-search-close").addEventListener("click", () => close(true));
      }
      panel.addEventListener("keydown", (e) => { if (e.key === "Escape") close(true); });
      // What the list shows now, for scripts and tests: the words typed, the words searched,
      // how many pages matched.
      instance.on("results", (found) => {
        panel.dataset.query = asked;
        panel.dataset.term = instance.searchTerm;
        panel.dataset.count = String((found && found.results || []).length);
        panel.dataset.filters = JSON.stringify(instance.searchFilters || {});
      });
      return panel;
    }

    function place() {
      if (!panel || onSearchPage || !box) return;
      const r = box.getBoundingClientRect();
      const margin = 8;
      const vw = document.documentElement.clientWidth;
      const narrow = vw < 700;
      const left = narrow ? margin : Math.max(margin, r.left);
      const top = Math.max(margin, r.bottom + 6);
      panel.style.left = left + "px";
      panel.style.top = top + "px";
      panel.style.width = (narrow ? vw - 2 * margin : Math.min(44 * 16, vw - left - margin)) + "px";
      panel.style.maxHeight = (window.innerHeight - top - margin) + "px";
    }

    function open() {
      if (!panel || onSearchPage) return;
      panel.hidden = false;
      place();
    }

    function close(refocus) {
      if (!panel || onSearchPage) return;
      panel.hidden = true;
      if (refocus && box) box.focus();
    }

    // Pagefind answers only the pages holding every word: when none does, the nearest tips
    // are those of the longest start of the query that finds some (a pasted line names the
    // error before its details), else of the one word that finds most. Never "No results"
    // alone: the note says which words were searched, or where to browse instead.
    let asking = 0;
    async function nearest(term) {
      await instance.triggerLoad();
      const pf = instance.__pagefind__;
      if (!pf) return { term, exact: true };
      const filters = instance.searchFilters || {};
      const count = async (t) => {
        const found = await pf.search(t, { filters });
        return (found && found.results) ? found.results.length : 0;
      };
      if (await count(term)) return { term, exact: true };
      const words = term.split(" ");
      let lo = 0, hi = words.length - 1; // the longest prefix (of at most hi words) with results
      while (lo < hi) {
        const mid = Math.ceil((lo + hi) / 2);
        if (await count(words.slice(0, mid).join(" "))) lo = mid; else hi = mid - 1;
      }
      if (lo > 0) return { term: words.slice(0, lo).join(" "), exact: false };
      let best = null, most = 0;
      for (const w of words) {
        const n = await count(w);
        if (n > most) { best = w; most = n; }
      }
      return best ? { term: best, exact: false } : { term, exact: false, none: true };
    }

    function showNote(text, chosen) {
      let note = panel.querySelector(".tips-search-note");
      if (!note) {
        note = document.createElement("p");
        note.className = "tips-search-note";
        note.setAttribute("aria-live", "polite");
        panel.querySelector(".tips-search-bar").after(note);
      }
      note.textContent = "";
      note.hidden = chosen.exact;
      panel.dataset.nearest = chosen.exact ? "" : chosen.term;
      if (chosen.exact) return;
      if (chosen.none) {
        note.append(`No tip matches “${text.trim()}”. Browse `);
        const all = document.createElement("a");
        all.href = new URL("generated/tags/index.html", new URL(siteRoot(), window.location.href)).href;
        all.textContent = "the tips by tag";
        note.append(all, " or the cards on the home page.");
        return;
      }
      note.append(`No tip holds every word of “${text.trim()}”; the nearest tips, for `);
      const words = document.createElement("strong");
      words.textContent = `“${chosen.term}”`;
      note.append(words, ":");
    }

    async function run(text) {
      const term = looksPasted(text) ? pastedTerms(text) : queryTerms(text);
      if (!term) { close(false); return; }
      const mine = ++asking;
      await ensurePanel();
      open();
      const chosen = await nearest(term);
      if (mine !== asking) return; // a newer query was typed meanwhile
      asked = text;
      showNote(text, chosen);
      instance.triggerSearch(chosen.term);
      if (onSearchPage) {
        const url = new URL(window.location.href);
        url.searchParams.set("q", text);
        window.history.replaceState(null, "", url);
      }
    }

    function fail(error) {
      console.warn("tips search:", error);
      if (panel) panel.remove();
      panel = null;
      if (sphinxResults) sphinxResults.hidden = false; // Sphinx's results stay the answer
    }

    for (const input of boxes) {
      input.setAttribute("autocomplete", "off");
      // Focusing the box loads the UI and the index's entry point, so the first keypress only
      // waits for the words it needs.
      input.addEventListener("focus", () => {
        box = input;
        loadUi().then((inst) => inst.triggerLoad()).catch(fail);
      });
      input.addEventListener("input", () => {
        box = input;
        clearTimeout(timer);
        timer = setTimeout(() => run(input.value).catch(fail), DEBOUNCE_MS);
      });
      input.addEventListener("keydown", (e) => {
        if (e.key === "Escape") close(false);
        if (e.key === "ArrowDown" && panel && !panel.hidden) {
          const first = panel.querySelector("a.tips-result-link");
          if (first) { e.preventDefault(); first.focus(); }
        }
      });
    }
    document.addEventListener("pointerdown", (e) => {
      if (panel && !panel.hidden && !panel.contains(e.target) && !boxes.includes(e.target)) close(false);
    });
    window.addEventListener("resize", place);

    if (onSearchPage) {
      const q = new URLSearchParams(window.location.search).get("q") || "";
      boxes.forEach((b) => { b.value = q; });
      const input = document.createElement("input");
      input.type = "search";
      input.className = "tips-search-page-input";
      input.placeholder = "Search the tips: an API name or a question";
      input.setAttribute("aria-label", "Search the tips");
      input.value = q;
      sphinxResults.before(input);
      boxes.push(input);
      input.addEventListener("input", () => {
        clearTimeout(timer);
        timer = setTimeout(() => run(input.value).catch(fail), DEBOUNCE_MS);
      });
      if (q) run(q).catch(fail);
      else ensurePanel().catch(fail);
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
