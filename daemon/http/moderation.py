"""The duplicates queue (``/moderation``): potential duplicates side by side, confirm or dismiss.

Server-rendered HTML (every value escaped with :func:`html.escape`), usable by keyboard: real
buttons and links in a sensible focus order, ``j``/``k`` to move between items, ``c`` to confirm and
``d`` to dismiss the focused item (a few lines of JavaScript; without it the buttons still work).

Decisions (:func:`decide_pair`) are written to PostgreSQL in one transaction under the dedup
worker's per-table advisory lock:

* confirm: the flag becomes ``duplicate``; ``nearsync.pair_decisions`` records ``duplicate``;
* dismiss: ``pair_decisions`` records ``not_duplicate`` with both index document versions and
  content fingerprints (:meth:`IndexDocument.content_fingerprint`), the flag
  and the pair's link are removed and the record is queued for the dedup worker, which re-clusters
  around it and skips the pair while both records are unchanged (an edit lifts the decision; a
  reindex, which changes versions but not content, does not).
"""

from __future__ import annotations

import difflib
import html
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import psycopg
from psycopg.rows import dict_row

from daemon.capture.queue import DEDUP_QUEUE, enqueue_fresh
from daemon.backends.base import IndexBackend
from daemon.dedup.ids import canonical
from daemon.db.queries import query
from daemon.http.models import MAX_PRICE

ACTIONS = {"confirm": "duplicate", "dismiss": "not_duplicate"}


class DecisionError(Exception):
    """A decision that cannot be applied; ``status`` is the HTTP status (404 no flag, 409 flag changed)."""

    def __init__(self, status: int, message: str) -> None:
        """Args: status: HTTP status code. message: for the moderator."""
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Decided:
    """The outcome of :func:`decide_pair`: the pair (canonical order), the decision and who made it."""

    a: str
    b: str
    decision: str
    decided_by: str


async def decide_pair(conn: psycopg.AsyncConnection[Any], backend: IndexBackend, table: str, record_id: str,
                      original_id: str, action: str, moderator: str) -> Decided:
    """Apply a moderator's decision on the flag of ``record_id`` (pointing at ``original_id``), and
    mark the table changed for the dedup sweep (named query ``sweep_changed``: clusters follow
    decisions, so a resting sweep makes a pass with it).

    Args:
        conn: an autocommit connection (the transaction is opened here).
        backend: opened index backend (for the document versions).
        table: tracked table. record_id / original_id: the flag's pair, as shown to the moderator.
        action: ``"confirm"`` or ``"dismiss"``. moderator: who decides (non-empty).
    Returns:
        :class:`Decided`.
    Raises:
        DecisionError: 404 no such flag, 409 the flag now points elsewhere, 422 bad action.
    """
    if action not in ACTIONS:
        raise DecisionError(422, f"action must be confirm or dismiss, got {action!r}")
    a, b = canonical(record_id, original_id)
    docs = await backend.get(table, [a, b])
    versions = {k: d.version for k, d in docs.items()}
    prints = {k: d.content_fingerprint() for k, d in docs.items()}
    params = {"table": table, "record_id": record_id}
    async with conn.transaction():
        await conn.execute(query("dedup_lock"), {"table": table})
        cur = await conn.execute(query("flag_for_update"), params)
        row = await cur.fetchone()
        if row is None:
            raise DecisionError(404, f"record {record_id} has no flag (already decided, or re-scored)")
        if row[2] != original_id:
            raise DecisionError(409, f"the flag of {record_id} now points at {row[2]}, not {original_id}: reload")
        decision = ACTIONS[action]
        await conn.execute(query("upsert_decision"), {
            "table": table, "a": a, "b": b, "decision": decision, "a_version": versions.get(a),
            "b_version": versions.get(b), "a_fingerprint": prints.get(a), "b_fingerprint": prints.get(b),
            "decided_by": moderator, "score": row[3]})
        await conn.execute(query("sweep_changed"), {"table": table})  # clusters follow decisions: the sweep may not rest
        if decision == "duplicate":
            await conn.execute(query("confirm_flag"), params)
        else:
            await conn.execute(query("delete_flag"), params)
            await conn.execute(query("delete_link"), {"table": table, "a": a, "b": b})
            await enqueue_fresh(conn, DEDUP_QUEUE, table, [(record_id, "U")])
    return Decided(a, b, decision, moderator)


async def load_queue(conn: psycopg.AsyncConnection[Any], category_col: str | None, *, category: str | None,
                     min_score: float | None, limit: int) -> tuple[list[dict[str, Any]], list[str], str | None]:
    """Potential duplicates newest first (filtered), the categories present, and the category filter used.

    Args:
        conn: a connection. category_col: the column holding the category role (None: no filter).
        category / min_score: filters (None: all); a category that no queued record has is dropped
            (an old link), so the page never shows a category it did not find in the database.
        limit: most items.
    Returns:
        ``(items, categories, category)``; items are rows of ``nearsync.flagged_records`` as dicts.
    Raises:
        psycopg.Error: the database failed (the caller answers 503).
    """
    col = category_col or "category"
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query("moderation_categories"), {"category_col": col})
        cats = [r["category"] for r in await cur.fetchall()]
        if category not in cats:
            category = None
        await cur.execute(query("moderation_queue"), {"category_col": col, "category": category,
                                                      "min_score": min_score, "limit": limit})
        items = list(await cur.fetchall())
    return items, cats, category


# -- rendering -------------------------------------------------------------------------------------

_WORD = re.compile(r"\S+|\s+")


def word_diff(left: str, right: str) -> tuple[str, str]:
    """Word-level diff of two texts as two escaped HTML fragments.

    Words only in ``left`` are wrapped in ``<del>``, words only in ``right`` in ``<ins>``; equal runs
    are plain. Returns ``(left_html, right_html)``.
    """
    a, b = _WORD.findall(left or ""), _WORD.findall(right or "")
    la: list[str] = []
    lb: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        ta, tb = html.escape("".join(a[i1:i2])), html.escape("".join(b[j1:j2]))
        if op == "equal":
            la.append(ta)
            lb.append(tb)
        else:
            if ta:
                la.append(f"<del>{ta}</del>")
            if tb:
                lb.append(f"<ins>{tb}</ins>")
    return "".join(la), "".join(lb)


def _e(v: Any) -> str:
    return html.escape("" if v is None else str(v))


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * 6371.0 * math.asin(min(1.0, math.sqrt(h)))


def _fields(row: Mapping[str, Any] | None, columns: Mapping[str, str]) -> dict[str, Any]:
    row = row or {}
    return {role: row.get(col) for role, col in columns.items()}


def _side(label: str, rid: str, f: Mapping[str, Any], title_html: str, body_html: str) -> str:
    price = _num(f.get("price"))
    lat, lon = _num(f.get("lat")), _num(f.get("lon"))
    loc = f"{lat:.4f}, {lon:.4f}" if lat is not None and lon is not None else "—"
    return (f'<section class="side"><h3>{_e(label)} <span class="rid">#{_e(rid)}</span></h3>'
            f'<p class="title">{title_html}</p>'
            f'<dl><dt>Price</dt><dd>{_e(f"{price:,.2f}") if price is not None else "—"}</dd>'
            f'<dt>Location</dt><dd>{_e(loc)}</dd><dt>Category</dt><dd>{_e(f.get("category") or "—")}</dd>'
            f'<dt>User</dt><dd>{_e(f.get("user") or "—")}</dd><dt>Created</dt><dd>{_e(f.get("created_at") or "—")}</dd></dl>'
            f'<p class="body">{body_html}</p></section>')


def _reasons(reasons: Mapping[str, Any] | None) -> str:
    rows = []
    for name, r in sorted((reasons or {}).items(), key=lambda kv: -float((kv[1] or {}).get("weight", 0))):
        r = r or {}
        sim = _num(r.get("similarity"))
        rows.append(f"<tr><th scope=\"row\">{_e(name)}</th><td>{_e(r.get('metric'))}</td>"
                    f"<td>{_e(f'{sim:.2f}') if sim is not None else '—'}</td><td>{_e(r.get('weight'))}</td></tr>")
    return ('<table class="reasons"><caption>Per-field reasons</caption><thead><tr><th scope="col">Field</th>'
            '<th scope="col">Metric</th><th scope="col">Similarity</th><th scope="col">Weight</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def render_item(n: int, item: Mapping[str, Any], columns: Mapping[str, str], hidden: Mapping[str, str]) -> str:
    """One queue item: the ad and its match side by side with differences, reasons and the two buttons.

    Args:
        n: position (1-based, for the heading). item: a ``load_queue`` row. columns: role -> column.
        hidden: extra hidden form fields (the CSRF token, filters to return to).
    Returns:
        An escaped HTML ``<article>``.
    """
    rec, orig = _fields(item.get("record"), columns), _fields(item.get("original"), columns)
    t_rec, t_orig = word_diff(str(rec.get("title") or ""), str(orig.get("title") or ""))
    b_rec, b_orig = word_diff(str(rec.get("body") or ""), str(orig.get("body") or ""))
    rid, oid = str(item["record_id"]), str(item["original_id"])
    extra = ""
    pr, po = _num(rec.get("price")), _num(orig.get("price"))
    if pr is not None and po is not None and 0.01 <= po <= MAX_PRICE and 0 <= pr <= MAX_PRICE:  # a bounded ratio
        extra += f"price {100 * (pr - po) / po:+.1f}%"
    coords = [_num(rec.get("lat")), _num(rec.get("lon")), _num(orig.get("lat")), _num(orig.get("lon"))]
    if all(c is not None for c in coords):
        extra += ("; " if extra else "") + f"{_km(*coords):.1f} km apart"  # type: ignore[arg-type]
    score = f"{float(item['score']):.1f}"
    inputs = "".join(f'<input type="hidden" name="{_e(k)}" value="{_e(v)}">' for k, v in hidden.items())
    return (f'<article class="item" tabindex="-1" id="item-{n}" data-record="{_e(rid)}" aria-labelledby="h-{n}">'
            f'<h2 id="h-{n}">{n}. Ad #{_e(rid)} may duplicate #{_e(oid)} — score {_e(score)}</h2>'
            f'<p class="summary">{_e(item.get("summary"))}{(" · " + _e(extra)) if extra else ""}'
            f' · flagged {_e(item.get("flagged_at"))}</p>'
            f'<div class="pair">{_side("This ad", rid, rec, t_rec, b_rec)}{_side("Its match", oid, orig, t_orig, b_orig)}</div>'
            f'{_reasons(item.get("reasons"))}'
            f'<form method="post" action="/moderation/decide" class="actions">'
            f'<input type="hidden" name="record_id" value="{_e(rid)}"><input type="hidden" name="original_id" value="{_e(oid)}">'
            f'{inputs}'
            f'<button type="submit" name="action" value="confirm" class="confirm">Confirm duplicate <kbd>c</kbd></button> '
            f'<button type="submit" name="action" value="dismiss" class="dismiss">Not a duplicate <kbd>d</kbd></button>'
            f'</form></article>')


CSS = """
body{font:16px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1280px;padding:0 1rem;color:#1b1b1b;background:#fafafa}
header{position:sticky;top:0;background:#fafafa;padding:.5rem 0;border-bottom:1px solid #ccc;z-index:1}
h1{font-size:1.4rem;margin:.3rem 0}h2{font-size:1.1rem;margin:.2rem 0}h3{font-size:1rem;margin:0 0 .3rem}
form.filters{display:flex;gap:.8rem;flex-wrap:wrap;align-items:end}label{display:flex;flex-direction:column;font-size:.85rem}
input,select,button{font:inherit;padding:.3rem .5rem}
.item{background:#fff;border:2px solid #ddd;border-radius:6px;margin:1rem 0;padding:.8rem}
.item:focus,.item.current{border-color:#0b57d0;outline:3px solid #a8c7fa}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:1rem}.side{border:1px solid #eee;padding:.5rem;border-radius:4px}
.title{font-weight:600}.body{white-space:pre-wrap;font-size:.95rem}.rid{color:#555;font-weight:normal}
dl{display:grid;grid-template-columns:auto 1fr;gap:0 .8rem;margin:.3rem 0;font-size:.9rem}dt{color:#555}dd{margin:0}
del{background:#ffd7d5;text-decoration:line-through}ins{background:#ccf0d2;text-decoration:none}
.reasons{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}.reasons td,.reasons th{border:1px solid #ddd;padding:.15rem .5rem;text-align:left}
.reasons caption{text-align:left;font-weight:600}
button.confirm{background:#b3261e;color:#fff;border:0;border-radius:4px}button.dismiss{background:#e8eaed;border:1px solid #999;border-radius:4px}
button:focus-visible,a:focus-visible,input:focus-visible,select:focus-visible{outline:3px solid #0b57d0;outline-offset:2px}
.status{padding:.4rem .6rem;background:#e6f4ea;border:1px solid #8c8}.error{background:#fce8e6;border-color:#d88}
kbd{font-size:.75rem;border:1px solid #999;border-radius:3px;padding:0 .25rem;background:#f5f5f5;color:#000}
.help{font-size:.85rem;color:#444}.who{margin:.2rem 0;font-size:.9rem}form.signout{display:inline;margin-left:.6rem}form.signout button{padding:.1rem .5rem}.skip{position:absolute;left:-999px}.skip:focus{left:1rem;top:1rem;background:#fff}
@media (max-width:900px){.pair{grid-template-columns:1fr}}
"""

JS = """
(function(){
  var items=[].slice.call(document.querySelectorAll('article.item'));var cur=-1;
  function go(i){if(!items.length)return;cur=Math.max(0,Math.min(items.length-1,i));
    items.forEach(function(x){x.classList.remove('current')});var it=items[cur];it.classList.add('current');
    it.focus({preventScroll:true});it.scrollIntoView({block:'nearest'});}
  document.addEventListener('keydown',function(e){
    var t=e.target.tagName;if(t==='INPUT'||t==='SELECT'||t==='TEXTAREA'||e.ctrlKey||e.metaKey||e.altKey)return;
    if(e.key==='j'){go(cur+1);e.preventDefault();}else if(e.key==='k'){go(cur-1);e.preventDefault();}
    else if((e.key==='c'||e.key==='d')&&cur>=0){
      items[cur].querySelector(e.key==='c'?'button.confirm':'button.dismiss').click();e.preventDefault();}
  });
  items.forEach(function(it,i){it.addEventListener('focusin',function(){cur=i;
    items.forEach(function(x){x.classList.remove('current')});it.classList.add('current');});});
})();
"""


def render_page(items: Sequence[Mapping[str, Any]], categories: Sequence[str], columns: Mapping[str, str], *,
                category: str | None, min_score: float | None, user: str, csrf: str, signed_in: bool,
                message: Mapping[str, Any] | None = None) -> str:
    """The whole ``/moderation`` page.

    Nothing from the query string is written into the page but the filters after validation (a
    category found in the database, a number), and messages come from the session
    (:func:`daemon.http.auth.take_flash`), never from the URL.

    Args:
        items: ``load_queue`` rows. categories: for the filter. columns: role -> column.
        category / min_score: current filters. user: who decides (shown; the credential's name).
        csrf: the session's CSRF token, put in every form. signed_in: show the sign-out button.
        message: ``{"kind": "status"|"error", "text": ...}`` from the last decision, or None.
    Returns:
        HTML text (UTF-8), every value escaped.
    """
    hidden = {"csrf_token": csrf}
    if category:
        hidden["category"] = category
    if min_score is not None:
        hidden["min_score"] = f"{min_score:g}"
    opts = "".join(f'<option value="{_e(c)}"{" selected" if c == category else ""}>{_e(c)}</option>'
                   for c in categories)
    msg = ""
    if message:
        role = "alert" if message.get("kind") == "error" else "status"
        cls = "status error" if role == "alert" else "status"
        msg = f'<p class="{cls}" role="{role}">{_e(message.get("text"))}</p>'
    signout = (f'<form method="post" action="/logout" class="signout"><input type="hidden" name="csrf_token" '
               f'value="{_e(csrf)}"><button type="submit">Sign out</button></form>') if signed_in else ""
    body = "".join(render_item(n, it, columns, hidden) for n, it in enumerate(items, 1))
    if not items:
        body = '<p>No potential duplicates to review. <a href="/moderation">Reload</a></p>'
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>Duplicates queue ({len(items)}) — nearsync</title><style>{CSS}</style></head><body>'
            f'<a class="skip" href="#queue">Skip to the queue</a>'
            f'<header><h1>Duplicates queue: {len(items)} potential duplicate{"s" if len(items) != 1 else ""}</h1>'
            f'<div class="who">Deciding as <strong id="user">{_e(user)}</strong> {signout}</div>'
            f'<form class="filters" method="get" action="/moderation" role="search">'
            f'<label for="category">Category<select id="category" name="category" accesskey="g">'
            f'<option value="">All</option>{opts}</select></label>'
            f'<label for="min_score">Min score<input id="min_score" name="min_score" type="number" min="0" max="100" '
            f'step="1" value="{_e(f"{min_score:g}") if min_score is not None else ""}"></label>'
            f'<button type="submit" accesskey="f">Filter</button></form>'
            f'<p class="help">Keys: <kbd>j</kbd>/<kbd>k</kbd> next/previous item, <kbd>c</kbd> confirm duplicate, '
            f'<kbd>d</kbd> not a duplicate; <kbd>Tab</kbd> moves through the buttons. '
            f'<del>Struck</del> words are only in this ad, <ins>green</ins> ones only in its match.</p>{msg}</header>'
            f'<main id="queue">{body}</main><script>{JS}</script></body></html>')


def back_url(category: str | None, min_score: float | None) -> str:
    """``/moderation?...`` keeping the (validated) filters of a decision form; no message in the URL."""
    q: dict[str, str] = {}
    if category:
        q["category"] = category
    if min_score is not None:
        q["min_score"] = f"{min_score:g}"
    return "/moderation" + (f"?{urlencode(q)}" if q else "")
