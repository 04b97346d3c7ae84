// Tables on a phone (tips.css, max-width 480px): each row becomes a block of "column: value"
// lines, so a row's device and verdict stay together instead of scrolling out of view. The
// column names come from each table's header row, written here on every cell as data-label.
(function () {
  "use strict";

  function label(table) {
    const head = table.tHead && table.tHead.rows[0];
    if (!head) return;
    const names = Array.from(head.cells).map((th) => th.textContent.trim());
    table.classList.add("tips-stackable");
    Array.from(table.tBodies).forEach((body) => Array.from(body.rows).forEach((row) => {
      Array.from(row.cells).forEach((cell, i) => {
        if (names[i] && !cell.dataset.label) cell.dataset.label = names[i];
      });
    }));
  }

  function init() {
    document.querySelectorAll("article table").forEach(label);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
