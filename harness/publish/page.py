"""The frame of every page of the published site: head, navigation, and the one script.

The script sorts a table when its header is clicked; nothing else runs. The page's
Content-Security-Policy admits that script by its SHA-256 hash and images from the site
itself, and nothing else: a record's string that slipped through escaping could neither run
nor load anything.
"""
from __future__ import annotations

import base64
import hashlib
from html import escape

from harness.report.html import STYLE as REPORT_STYLE

# Clicking a header sorts its table by that column: ascending first, then descending; numeric
# cells (class "num") by the number they start with; "-" and empty cells stay last. The
# fragment #sort=TABLE.COLUMN.asc|desc clicks the same headers on load, so a sorted table
# can be linked to.
SCRIPT = """
(function () {
  "use strict";
  function key(cell) {
    var text = cell ? cell.textContent.trim() : "";
    if (text === "" || text === "-") { return null; }
    if (cell.classList.contains("num")) {
      var value = parseFloat(text);
      return isNaN(value) ? null : value;
    }
    return text.toLowerCase();
  }
  function sortBy(table, column, descending) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[column]), y = key(b.cells[column]);
      if (x === null || y === null) { return (x === null) - (y === null); }
      var order = x < y ? -1 : (x > y ? 1 : 0);
      return descending ? -order : order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, index) {
      th.setAttribute("aria-sort", index === column ?
        (descending ? "descending" : "ascending") : "none");
    });
  }
  function prepare(table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, column) {
      var button = document.createElement("button");
      button.type = "button";
      button.textContent = th.textContent;
      button.addEventListener("click", function () {
        sortBy(table, column, th.getAttribute("aria-sort") === "ascending");
      });
      th.textContent = "";
      th.appendChild(button);
    });
  }
  function fromFragment() {
    var match = /^#sort=([A-Za-z0-9_-]+)\\.([0-9]+)\\.(asc|desc)$/.exec(window.location.hash);
    var table = match && document.getElementById(match[1]);
    if (!table || !table.classList.contains("sortable")) { return; }
    var th = table.tHead.rows[0].cells[parseInt(match[2], 10)];
    if (!th) { return; }
    th.removeAttribute("aria-sort");
    th.firstChild.click();
    if (match[3] === "desc") { th.firstChild.click(); }
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), prepare);
  fromFragment();
  window.addEventListener("hashchange", fromFragment);
}());
"""
SCRIPT_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode("ascii")
CSP = ("default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; "
       f"script-src 'sha256-{SCRIPT_HASH}'")
STYLE = REPORT_STYLE + """
nav { margin-bottom: 1em; font-size: 0.9em; }
th button { font: inherit; font-weight: bold; background: none; border: 0; padding: 0;
            cursor: pointer; text-align: left; }
th[aria-sort="ascending"] button::after { content: " \\25B2"; }
th[aria-sort="descending"] button::after { content: " \\25BC"; }
"""


def e(text: str) -> str:
    """Text as HTML, quotes included (attributes and content alike)."""
    return escape(text, quote=True)


def render_page(title: str, body: list[str], *, root: str) -> str:
    """A whole page; `root` is the relative way back to the site's top ("" or "../")."""
    lines = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             f'<meta http-equiv="Content-Security-Policy" content="{e(CSP)}">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{e(title)}</title>", f"<style>{STYLE}</style>", "</head>", "<body>"]
    if root:
        lines.append(f'<nav><a href="{e(root)}index.html">All machines and workloads</a></nav>')
    lines += [f"<h1>{e(title)}</h1>", *body, f"<script>{SCRIPT}</script>", "</body>",
              "</html>"]
    return "\n".join(lines) + "\n"
