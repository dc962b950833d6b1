"""The HTML Telegram accepts in ``parse_mode=HTML``, as the fake Bot API
(:mod:`bot.bench.fakes.telegram_api`) checks it: unknown or unbalanced tags, a bare
``<`` or ``&`` are refused ("can't parse entities"), like the real server does.
"""

from __future__ import annotations

import html
import re

_ALLOWED_TAGS = frozenset(
    {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler", "a",
     "code", "pre", "blockquote", "tg-emoji"}
)  # fmt: skip
_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)((?:\s+[a-zA-Z-]+=\"[^\"<>]*\")*)\s*>")
_ENTITY = re.compile(r"&(lt|gt|amp|quot|#\d{1,7}|#x[0-9a-fA-F]{1,6});")


class HtmlError(ValueError):
    """Why Telegram would refuse a text in HTML parse mode."""


def parse_telegram_html(text: str) -> str:
    """The visible text of ``text`` as Telegram parses it; raises HtmlError on what it rejects."""
    out: list[str] = []
    stack: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "<":
            m = _TAG.match(text, i)
            if not m:
                raise HtmlError(f"Unclosed start tag at byte offset {i}")
            closing, tag = m.group(1) == "/", m.group(2).lower()
            if tag not in _ALLOWED_TAGS:
                raise HtmlError(f'Unsupported start tag "{tag}" at byte offset {i}')
            if closing:
                if not stack or stack[-1] != tag:
                    expected = f'"</{stack[-1]}>"' if stack else "nothing"
                    raise HtmlError(
                        f"Unmatched end tag at byte offset {i}, expected {expected}, found "
                        f'"</{tag}>"'
                    )
                stack.pop()
            else:
                if tag == "a" and 'href="' not in m.group(3):
                    raise HtmlError(f"Tag a without href at byte offset {i}")
                stack.append(tag)
            i = m.end()
        elif ch == "&":
            m = _ENTITY.match(text, i)
            if not m:
                raise HtmlError(f"Unsupported HTML entity at byte offset {i}")
            out.append(html.unescape(m.group(0)))
            i = m.end()
        elif ch == ">":
            raise HtmlError(f"Unexpected > at byte offset {i}")
        else:
            out.append(ch)
            i += 1
    if stack:
        raise HtmlError(f'Can\'t find end tag corresponding to start tag "{stack[-1]}"')
    return "".join(out)
