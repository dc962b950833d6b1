"""Conversation analytics (seed 001 "M5"), rendered on the server as SVG.

Three charts, each an ``image/svg+xml`` document under ``/analytics/``: turns and cost
per conversation, activity per channel per day, and the topic distribution. SVG built
here is static (no script, every text escaped) and the page shows it through ``<img>``,
where a browser never runs scripts anyway. ``/api/analytics`` gives the totals (the
conversations', and apart, ``parties``: the model's answers to known contacts).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape
from zoneinfo import ZoneInfo

from aiohttp import web

from bot.brain.cost import shown_usd
from bot.events import iso
from bot.graphemes import ELLIPSIS, isolate, shorten, shown_controls, shown_invisible
from bot.index import SELECT_CONVERSATION, ConversationRecord, row_to_record
from bot.labels import UNTITLED, channel_label, display_title, plain_title
from channels.web.titles import derived_titles

if TYPE_CHECKING:
    from channels.web.server import WebChannel

CHANNEL_COLOURS = {"web": "#2563eb", "telegram": "#0891b2", "email": "#ea580c"}
OTHER_COLOUR = "#6b7280"
FONT = "font-family='DejaVu Sans, Arial, sans-serif'"


# Characters XML 1.0 forbids even escaped (controls, lone surrogates, U+FFFE/FFFF): one
# in a title made the whole chart unparseable, and a surrogate failed to encode at all.
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _e(text: Any) -> str:
    return escape(NOT_XML.sub("\ufffd", str(text)), {'"': "&quot;", "'": "&apos;"})


def _shown(text: str) -> str:
    """A label as the dashboard shows names: bidi controls and invisible characters
    written out ("[U+202E]", "[U+200B]"). A Telegram group's name (any member sets it)
    reversed and hid letters of its chart label (before session 40)."""
    return shown_invisible(shown_controls(text))


_FSI, _PDI = "\u2068", "\u2069"  # the isolates bot.graphemes.isolate puts around RTL text


# The beginning of a "[U+200B]" that the cut ends in
_CUT_CODE = re.compile(r"\[(U(\+[0-9A-F]{0,5})?)?" + ELLIPSIS + "$")


def _clip(text: str, n: int) -> str:
    """``text`` cut at ``n`` characters, not inside a written-out "[U+200B]", an isolate
    it cut through closed again."""
    kept = _CUT_CODE.sub(ELLIPSIS, shorten(text, n))
    return kept + _PDI * max(kept.count(_FSI) - kept.count(_PDI), 0)


def _conversation_label(rec: ConversationRecord, title: str | None) -> str:
    """The sidebar's name for ``rec`` (:func:`bot.labels.display_title`: a group's title,
    the sender and subject of a mail); untitled, who it is with and the channel, else a
    short id. (Before session 40 the chart read the contact or subject alone, not the
    group's title nor an escalation's name.)"""
    if plain_title(title or ""):
        return display_title(rec.channel, title, rec.channel_meta, rec.participants)
    who = channel_label(rec.channel, rec.channel_meta, rec.participants)
    if who:
        return f"{isolate(who)} ({rec.channel})"
    return f"{UNTITLED} ({rec.id[-6:]})"


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    note: str = ""
    colour: str = "#2563eb"


def bar_chart(title: str, bars: list[Bar], *, width: int = 640, empty: str = "No data yet") -> str:
    """A horizontal bar chart; the longest bar spans the plot width."""
    row, top, label_w = 22, 34, 200
    height = top + max(len(bars), 1) * row + 12
    plot_w = width - label_w - 130
    peak = max((b.value for b in bars), default=0) or 1
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' {FONT} font-size='12' role='img' "
        f"aria-label='{_e(title)}'>",
        f"<rect width='{width}' height='{height}' fill='#ffffff'/>",
        f"<text x='8' y='20' font-size='14' font-weight='bold'>{_e(title)}</text>",
        # Labels start at the left and are cut at their column: however wide the
        # letters, a title keeps its beginning (right-aligned, it lost it off the edge).
        f"<clipPath id='labels'><rect width='{label_w - 8}' height='{height}'/></clipPath>",
    ]
    if not bars:
        parts.append(f"<text x='8' y='{top + 14}' fill='#6b7280'>{_e(empty)}</text>")
    for i, bar in enumerate(bars):
        y = top + i * row
        w = max(bar.value / peak * plot_w, 1 if bar.value else 0)
        label = _shown(bar.label)
        parts.append(
            f"<text x='8' y='{y + 14}' clip-path='url(#labels)'>"
            f"<title>{_e(label)}</title>{_e(_clip(label, 28))}</text>"
        )
        parts.append(
            f"<rect x='{label_w}' y='{y + 3}' width='{w:.1f}' height='{row - 6}' "
            f"rx='3' fill='{bar.colour}' data-value='{bar.value:g}'/>"
        )
        parts.append(
            f"<text x='{label_w + w + 6:.1f}' y='{y + 14}' fill='#374151'>"
            f"{_e(bar.note or f'{bar.value:g}')}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def column_chart(
    title: str,
    days: list[date],
    series: dict[str, list[int]],
    *,
    width: int = 640,
    height: int = 260,
) -> str:
    """Stacked columns per day, one colour per channel, with a legend."""
    left, right, top, bottom = 40, 10, 52, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    totals = [sum(s[i] for s in series.values()) for i in range(len(days))]
    peak = max(totals, default=0) or 1
    col_w = plot_w / max(len(days), 1)
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' {FONT} font-size='11' role='img' "
        f"aria-label='{_e(title)}'>",
        f"<rect width='{width}' height='{height}' fill='#ffffff'/>",
        f"<text x='8' y='20' font-size='14' font-weight='bold'>{_e(title)}</text>",
        f"<line x1='{left}' y1='{top + plot_h}' x2='{width - right}' y2='{top + plot_h}' "
        "stroke='#9ca3af'/>",
        f"<text x='{left - 4}' y='{top + 4}' text-anchor='end' fill='#6b7280'>{peak}</text>",
        f"<text x='{left - 4}' y='{top + plot_h}' text-anchor='end' fill='#6b7280'>0</text>",
    ]
    x = left + 8
    for name in series:
        colour = CHANNEL_COLOURS.get(name, OTHER_COLOUR)
        parts.append(
            f"<rect x='{x}' y='30' width='10' height='10' fill='{colour}'/>"
            f"<text x='{x + 14}' y='39'>{_e(_shown(name))}</text>"
        )
        x += 24 + 7 * len(name)
    for i, day in enumerate(days):
        y = float(top + plot_h)
        for name, values in series.items():
            h = values[i] / peak * plot_h
            if h <= 0:
                continue
            y -= h
            parts.append(
                f"<rect x='{left + i * col_w + 1:.1f}' y='{y:.1f}' "
                f"width='{max(col_w - 2, 1):.1f}' height='{h:.1f}' "
                f"fill='{CHANNEL_COLOURS.get(name, OTHER_COLOUR)}' "
                f"data-channel='{_e(name)}' data-day='{day.isoformat()}' "
                f"data-value='{values[i]}'/>"
            )
        if i % max(len(days) // 6, 1) == 0:
            parts.append(
                f"<text x='{left + i * col_w:.1f}' y='{height - 10}' fill='#6b7280'>"
                f"{day.strftime('%b %d')}</text>"
            )
    if not any(totals):
        parts.append(
            f"<text x='{left + 8}' y='{top + plot_h / 2:.0f}' fill='#6b7280'>"
            "No activity in this period</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _day_counts(span: list[date], zone: ZoneInfo) -> tuple[str, list[Any]]:
    """The query counting turns per day of ``span`` (days of the owner's calendar in
    ``zone``) and channel: rows of (day's index, channel, count).

    A day is the UTC minutes from its midnight to the next (a message at 00:30 in Berlin
    belongs to that day, not the one before; a zone half an hour off UTC is right too),
    compared with the first 16 characters of a turn's UTC timestamp: each day is a range
    of the ``turns_by_time`` index, summed in SQLite. Until session 41 the turns were
    counted per minute and those rows (one per minute and channel: 64,000 in a month of
    100,000 turns) put on their day in Python on the event loop: 48 ms of its CPU and
    stalls up to a tenth of a second (Telegram and mail waiting) at every look."""
    bounds = [
        iso(datetime.combine(day, time(), tzinfo=zone))[:16]
        for day in (*span, span[-1] + timedelta(days=1))
    ]
    days = ", ".join("(?, ?, ?)" for _ in span)
    params: list[Any] = [x for i in range(len(span)) for x in (i, bounds[i], bounds[i + 1])]
    return (
        f"WITH days(i, lo, hi) AS (VALUES {days})"
        " SELECT d.i, coalesce(t.channel, c.channel), count(*) FROM days d"
        " JOIN turns t ON t.timestamp >= d.lo AND t.timestamp < d.hi"
        " JOIN conversations c ON c.id = t.conversation_id GROUP BY d.i, 2",
        params,
    )


class Analytics:
    """SQL over ``conversations.db`` feeding the charts."""

    def __init__(self, channel: WebChannel, now: Any = None) -> None:
        self.channel = channel
        self._now = now or (lambda: datetime.now(UTC))

    @property
    def db(self) -> Any:
        return self.channel.services.index.db

    async def conversations_chart(self, limit: int = 15) -> str:
        rows = await self.db.fetchall(
            f"{SELECT_CONVERSATION} ORDER BY turn_count DESC, updated DESC LIMIT ?", (limit,)
        )
        records = [row_to_record(row) for row in rows]
        titles = await derived_titles(self.channel.services, records)
        bars = [
            Bar(
                label=_conversation_label(rec, titles.get(rec.id, rec.title)),
                value=rec.turn_count,
                note=f"{rec.turn_count} turn{'s' if rec.turn_count != 1 else ''}"
                f" · {shown_usd(rec.cost_total)}",
                colour=CHANNEL_COLOURS.get(rec.channel, OTHER_COLOUR),
            )
            for rec in records
        ]
        return bar_chart("Turns and cost per conversation", bars)

    async def channels_chart(self, days: int = 30) -> str:
        """Messages per channel per day of the owner's calendar (``owner.timezone``)."""
        zone = ZoneInfo(self.channel.config.owner.timezone)
        today = self._now().astimezone(zone).date()
        span = [today - timedelta(days=days - 1 - i) for i in range(days)]
        rows = await self.db.fetchall(*_day_counts(span, zone))
        series: dict[str, list[int]] = {}
        for i, channel, count in rows:
            series.setdefault(str(channel), [0] * days)[int(i)] += int(count)
        ordered = dict(sorted(series.items(), key=lambda kv: (kv[0] not in CHANNEL_COLOURS, kv[0])))
        return column_chart(f"Messages per channel per day, last {days} days", span, ordered)

    async def topics_chart(self, limit: int = 15) -> str:
        rows = await self.db.fetchall("SELECT topics FROM conversations")
        counts: Counter[str] = Counter()
        for (raw,) in rows:
            try:
                topics = json.loads(raw or "[]")
            except ValueError:
                continue
            counts.update({str(t).strip().lower() for t in topics if str(t).strip()})
        bars = [
            Bar(label=t, value=n, note=f"{n} conversation{'s' if n != 1 else ''}", colour="#7c3aed")
            for t, n in counts.most_common(limit)
        ]
        return bar_chart("Topic distribution", bars, empty="No topics yet (named after turn 5)")

    async def totals(self) -> dict[str, Any]:
        row = await self.db.fetchone(
            "SELECT count(*), coalesce(sum(turn_count), 0), coalesce(sum(cost_total), 0),"
            " coalesce(sum(tokens_in), 0), coalesce(sum(tokens_out), 0) FROM conversations"
        )
        n, turns, cost, tin, tout = row or (0, 0, 0, 0, 0)
        per_channel = await self.db.fetchall(
            "SELECT channel, count(*), coalesce(sum(turn_count), 0) FROM conversations"
            " GROUP BY channel ORDER BY channel"
        )
        # The model's answers to known contacts: paid calls in no conversation, beside
        # the conversations' own (before session 40 counted nowhere); /status says the
        # same sums (bot.command_status.party_costs_line).
        parties = await self.channel.services.external.answer_costs()
        return {
            "conversations": n,
            "turns": turns,
            "cost": round(float(cost), 6),
            "tokensIn": tin,
            "tokensOut": tout,
            "channels": [{"channel": c, "conversations": k, "turns": t} for c, k, t in per_channel],
            "parties": parties.to_dict(),
        }


def setup_analytics(app: web.Application, channel: WebChannel) -> None:
    analytics = Analytics(channel)
    charts = {
        "conversations": analytics.conversations_chart,
        "channels": analytics.channels_chart,
        "topics": analytics.topics_chart,
    }

    async def chart(request: web.Request) -> web.Response:
        render = charts.get(request.match_info["name"])
        if render is None:
            raise web.HTTPNotFound()
        return web.Response(text=await render(), content_type="image/svg+xml")

    async def totals(request: web.Request) -> web.Response:
        return web.json_response(await analytics.totals())

    app.router.add_get("/analytics/{name}.svg", chart)
    app.router.add_get("/api/analytics", totals)
