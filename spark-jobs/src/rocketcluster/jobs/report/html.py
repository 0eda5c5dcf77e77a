"""HTML building blocks for the report: escaping, badges, tables, figures, and the
page's inlined stylesheet and script (the report is read offline: nothing is fetched).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Final

# Status → CSS class; text always accompanies the colour.
_BADGE_CLASS: Final = {
    "OK": "ok",
    "WARN": "warn",
    "STALL": "stall",
    "REWIND": "rewind",
    "STOP": "stop",
    "ERR": "err",
    "UNCLEAN": "err",
    "NO MASTER": "err",
    "FAILOVER": "stall",
    "FLAPS": "warn",
    "STABLE": "ok",
    "IN TIER": "muted",
    "LOCAL": "info",
}


def esc(value: object) -> str:
    """Text as HTML, quotes included (it may land in an attribute)."""
    return escape(str(value), quote=True)


def badge(status: str) -> str:
    """A status badge: coloured, and the status spelled out for those who can't tell
    the colours apart."""
    cls = _BADGE_CLASS.get(status.upper(), "unknown")
    return f'<span class="badge b-{cls}">{esc(status.upper())}</span>'


@dataclass(frozen=True)
class Cell:
    """A table cell: ``html`` is already escaped; ``key`` sorts it (numbers sort as
    numbers); ``num`` right-aligns it."""

    html: str
    key: str | float | None = None
    num: bool = False


def text(value: object) -> Cell:
    return Cell(esc(value), str(value))


def number(html_text: str, key: float | None) -> Cell:
    return Cell(esc(html_text), key, num=True)


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Cell]],
    *,
    name: str,
    row_ids: Sequence[str | None] | None = None,
    row_classes: Sequence[str] | None = None,
) -> str:
    """A sortable table (click a header); ``name`` marks it for tests and styling."""
    head = "".join(f'<th scope="col">{esc(h)}</th>' for h in headers)
    body = []
    for i, row in enumerate(rows):
        attrs = ""
        if row_ids is not None and row_ids[i]:
            attrs += f' id="{esc(row_ids[i])}"'
        if row_classes is not None and row_classes[i]:
            attrs += f' class="{esc(row_classes[i])}"'
        cells = "".join(
            f"<td{' class=num' if c.num else ''}"
            f"{'' if c.key is None else f' data-v={_attr(c.key)}'}>{c.html}</td>"
            for c in row
        )
        body.append(f"<tr{attrs}>{cells}</tr>")
    return (
        f'<div class="tablewrap"><table class="sortable" data-table="{esc(name)}">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def _attr(key: str | float) -> str:
    return f'"{esc(key)}"' if isinstance(key, str) else f'"{key!r}"'


def figure(name: str, svg: str, caption: str, *, label: str) -> str:
    """A plot: ``data-plot`` names it for tests; ``label`` describes it to a screen
    reader."""
    return (
        f'<figure class="plot" data-plot="{esc(name)}">'
        f'<div class="svgwrap" role="img" aria-label="{esc(label)}">{svg}</div>'
        f"<figcaption>{caption}</figcaption></figure>"
    )


def note(message: str, *, kind: str = "empty") -> str:
    """A sentence standing in for a table or plot: ``kind`` is ``missing`` (job not
    run), ``empty`` (nothing to show, and why) or ``bad`` (schema mismatch)."""
    return f'<p class="note note-{esc(kind)}" data-note="{esc(kind)}">{message}</p>'


def howto(title: str, items: Sequence[tuple[str, str]], intro: str = "") -> str:
    """A folded "how to read this" box: a term (often a badge) and what it means."""
    rows = "".join(f"<dt>{term}</dt><dd>{meaning}</dd>" for term, meaning in items)
    lead = f"<p>{intro}</p>" if intro else ""
    return (
        f'<details class="howto"><summary>How to read this: {esc(title)}</summary>'
        f"{lead}<dl>{rows}</dl></details>"
    )


CSS: Final = """
:root{--bg:#f6f8fa;--fg:#1f2328;--muted:#59636e;--card:#fff;--line:#d1d9e0;
--ok:#1a7f37;--warn:#9a6700;--stall:#bc4c00;--rewind:#8250df;--stop:#cf222e;--err:#82071e;
--info:#0969da}
*{box-sizing:border-box}
html{background:var(--bg);color:var(--fg)}
body{margin:0 auto;max-width:1240px;padding:0 20px 48px;
font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","DejaVu Sans",sans-serif}
header.top{padding:20px 0 8px;display:flex;flex-wrap:wrap;gap:4px 24px;align-items:baseline}
header.top h1{font-size:22px;margin:0}
header.top .meta{color:var(--muted)}
nav.toc{position:sticky;top:0;z-index:2;background:var(--bg);border-bottom:1px solid var(--line);
padding:6px 0;margin-bottom:12px;display:flex;gap:18px;flex-wrap:wrap}
nav.toc a{color:var(--info);text-decoration:none;font-weight:600}
nav.toc a:hover{text-decoration:underline}
section,.headline{background:var(--card);border:1px solid var(--line);border-radius:8px;
padding:16px 20px;margin:0 0 18px}
h2{font-size:18px;margin:0 0 10px}
h3{font-size:15px;margin:18px 0 8px}
.headline{border-left:6px solid var(--stop)}
.headline.healthy{border-left-color:var(--ok)}
.headline h2{margin-bottom:6px}
.headline ul{list-style:none;margin:0;padding:0}
.headline li{padding:4px 0;display:flex;gap:10px;align-items:baseline}
.headline li a{color:var(--fg);text-decoration:none}
.headline li a:hover{text-decoration:underline}
.headline .allgood{font-size:17px;font-weight:600;color:var(--ok)}
.headline .unchecked{color:var(--muted)}
.headline .extra{color:var(--muted);margin-top:6px}
.badge{display:inline-block;min-width:64px;text-align:center;padding:1px 7px;border-radius:10px;
font:700 11px/1.6 ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;
color:#fff;letter-spacing:.03em;white-space:nowrap}
.b-ok{background:var(--ok)}.b-warn{background:#d4a72c;color:#1f2328}
.b-stall{background:var(--stall)}.b-rewind{background:var(--rewind)}
.b-stop{background:var(--stop)}.b-err{background:var(--err)}
.b-info{background:var(--info)}.b-muted{background:#818b98}.b-unknown{background:#57606a}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(270px,1fr));gap:10px}
.card{border:1px solid var(--line);border-left:5px solid var(--ok);border-radius:6px;
padding:8px 12px}
.card.s-warn{border-left-color:#d4a72c}.card.s-stall{border-left-color:var(--stall)}
.card.s-rewind{border-left-color:var(--rewind)}.card.s-stop{border-left-color:var(--stop)}
.card.s-err{border-left-color:var(--err)}
.card .name{font-weight:700;word-break:break-all}
.card .facts{color:var(--muted);font-size:12.5px}
.card .reason{margin-top:4px}
figure.plot{margin:12px 0;padding:0}
figure.plot .svgwrap{overflow-x:auto}
figure.plot svg{display:block;width:100%;max-width:1100px;height:auto}
figure.plot svg *{stroke-linejoin:round;stroke-linecap:butt}
figure.plot figcaption{color:var(--muted);font-size:12.5px;margin-top:2px}
.tablewrap{overflow-x:auto;max-height:560px;overflow-y:auto;border:1px solid var(--line);
border-radius:6px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{padding:4px 8px;text-align:left;vertical-align:top;border-bottom:1px solid #eaeef2}
thead th{position:sticky;top:0;background:#f0f3f6;cursor:pointer;user-select:none;
vertical-align:bottom}
thead th:after{content:" ↕";color:#aab4be;font-size:11px}
thead th.asc:after{content:" ▲";color:var(--fg)}thead th.desc:after{content:" ▼";color:var(--fg)}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tbody tr:nth-child(even){background:#f9fafb}
tbody tr:target{outline:2px solid var(--info)}
tr.bad td{background:#fff0ee}
.meter{display:inline-block;width:70px;height:8px;background:#eaeef2;border-radius:4px;
vertical-align:middle;margin-right:6px;overflow:hidden}
.meter i{display:block;height:100%;background:var(--ok)}
.meter.low i{background:var(--stop)}
.note{padding:10px 12px;border-radius:6px;background:#f6f8fa;border:1px dashed var(--line);
color:var(--muted)}
.note-missing{border-style:solid}.note-bad{border-color:var(--stop);color:var(--stop)}
.total{font-size:15px;margin:8px 0}
.total b{font-size:17px}
details.howto{margin:4px 0 12px;background:#f6f8fa;border-radius:6px;padding:6px 12px}
details.howto summary{cursor:pointer;font-weight:600;color:var(--info)}
details.howto dl{display:grid;grid-template-columns:max-content 1fr;gap:6px 14px;margin:8px 0}
details.howto dt{font-weight:600}details.howto dd{margin:0}
details.raw pre{white-space:pre-wrap;font-size:12px;max-height:400px;overflow:auto}
.filter{margin:6px 0;display:flex;gap:14px;align-items:center;flex-wrap:wrap}
.filter input[type=search]{padding:3px 8px;border:1px solid var(--line);border-radius:6px;
min-width:240px}
footer{color:var(--muted);font-size:12px;text-align:center}
@media print{nav.toc{display:none}.tablewrap{max-height:none}details.howto{display:none}}
"""

# Sort on header click; filter the lag table by text and by "problems only".
JS: Final = """
(function () {
  "use strict";
  function key(td) {
    var v = td.getAttribute("data-v");
    if (v === null) { v = td.textContent; }
    var n = Number(v);
    return (v !== "" && !isNaN(n)) ? n : String(v).toLowerCase();
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = table.querySelectorAll("thead th");
    heads.forEach(function (th, col) {
      th.addEventListener("click", function () {
        var asc = !th.classList.contains("asc");
        heads.forEach(function (h) { h.classList.remove("asc", "desc"); });
        th.classList.add(asc ? "asc" : "desc");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = key(a.cells[col]), y = key(b.cells[col]);
          if (typeof x !== typeof y) { x = String(x); y = String(y); }
          return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  document.querySelectorAll("[data-filter-for]").forEach(function (box) {
    var table = document.querySelector(
      'table[data-table="' + box.getAttribute("data-filter-for") + '"]');
    if (!table) { return; }
    var search = box.querySelector("input[type=search]");
    var only = box.querySelector("input[type=checkbox]");
    function apply() {
      var q = search ? search.value.toLowerCase() : "";
      Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
        var hide = (q && r.textContent.toLowerCase().indexOf(q) < 0) ||
                   (only && only.checked && !r.classList.contains("bad"));
        r.style.display = hide ? "none" : "";
      });
    }
    if (search) { search.addEventListener("input", apply); }
    if (only) { only.addEventListener("change", apply); }
  });
})();
"""

# The browser enforces what the report promises: nothing loads from anywhere.
CSP: Final = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)
