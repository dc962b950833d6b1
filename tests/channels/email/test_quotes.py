"""Quote and signature stripping: the project's own client corpus and the third-party
fixtures of github/email_reply_parser and zapier/email-reply-parser (read from ../shared)."""

from __future__ import annotations

import json
import re
import time
from email.message import EmailMessage
from typing import Any

import pytest

from bot.mail_subjects import is_forward_subject
from channels.email.parsing import parse_message
from channels.email.quotes import strip_reply
from tests.channels.email.helpers import shared_dir
from tests.channels.email.replies import REPLIES

FIXTURES = shared_dir() / "bench" / "email_replies"


@pytest.mark.parametrize(
    ("body", "expected"), [(b, e) for _, b, e in REPLIES], ids=[i for i, _, _ in REPLIES]
)
def test_project_replies(body: str, expected: str) -> None:
    assert strip_reply(body) == expected


def test_corpus_covers_clients() -> None:
    ids = " ".join(i for i, _, _ in REPLIES)
    assert len(REPLIES) >= 15
    for client in ("gmail", "outlook", "apple", "thunderbird", "iphone", "android"):
        assert client in ids


def test_all_quote_returns_full_text() -> None:
    body = "> only a quote\n> nothing new"
    assert strip_reply(body) == body


def test_plain_text_untouched() -> None:
    body = "Line one\n\n  indented\n- bullet\n-- not a delimiter here"
    assert strip_reply(body) == body


def _expectations() -> dict[str, Any]:
    path = FIXTURES / "expectations.json"
    if not path.exists():
        from tests.channels.email.helpers import missing

        missing(f"third-party reply fixtures not found at {FIXTURES}")
    return json.loads(path.read_text(encoding="utf-8"))


def _cases() -> list[tuple[str, str, dict[str, Any]]]:
    path = FIXTURES / "expectations.json"
    if not path.exists():
        return [("missing", "missing", {})]
    data = json.loads(path.read_text(encoding="utf-8"))
    return [
        (suite, name, spec)
        for suite in ("email_reply_parser", "email-reply-parser")
        for name, spec in data[suite]["fixtures"].items()
    ]


@pytest.mark.parametrize(
    ("suite", "name", "spec"), _cases(), ids=[f"{s}:{n.rsplit('/', 1)[-1]}" for s, n, _ in _cases()]
)
def test_third_party_fixture(suite: str, name: str, spec: dict[str, Any]) -> None:
    _expectations()
    body = (FIXTURES / suite / name).read_bytes().decode("utf-8")
    started = time.perf_counter()
    visible = strip_reply(body)
    elapsed = time.perf_counter() - started
    if "max_seconds" in spec:
        # The upstream suites bound these pathological inputs; a generous CPU bound
        # catches a quadratic regression without being a timing benchmark.
        assert elapsed < spec["max_seconds"] * 5
    exact = spec.get("visible_text", spec.get("reply"))
    if exact is not None:
        assert visible == exact
    for needle in spec.get("reply_contains", []):
        assert needle in visible
    for needle in spec.get("reply_not_contains", []):
        assert needle not in visible
    # Fragment expectations: what the upstream parser shows must be in our reply, what
    # it hides (quotes, signatures) must not be. Upstream keeps a quoted attribution
    # header visible; like zapier's parse_reply we drop it, so quoted fragments count as
    # hidden.
    hidden = spec.get("hidden")
    quoted = spec.get("quoted") or [False] * len(hidden or [])
    if hidden is None:
        return
    patterns: dict[str, list[tuple[str, bool]]] = {}
    for idx, pats in spec.get("fragment_matches", {}).items():
        patterns.setdefault(idx, []).extend((p, True) for p in pats)
    for idx, needles in spec.get("fragment_contains", {}).items():
        patterns.setdefault(idx, []).extend((n, False) for n in needles)
    for idx, text in spec.get("fragment_equals", {}).items():
        if text.strip():
            patterns.setdefault(idx, []).append((text.strip(), False))
    for idx, pats in patterns.items():
        i = int(idx)
        shown = not hidden[i] and not quoted[i]
        for pat, is_regex in pats:
            if not shown and not is_regex and len(pat) < 4:
                continue  # "--", ">": too short to say anything about what was hidden
            found = (re.search(pat, visible, re.M) is not None) if is_regex else pat in visible
            assert found == shown, (idx, pat, visible)


@pytest.mark.parametrize(
    ("subject", "header"),
    [
        ("I: Fattura 42", "Da: Fornitore <bill@supplier.it>\nInviato: lunedì\nOggetto: Fattura 42"),
        (
            "VB: Faktura 42",
            "Från: Leverantör <bill@supplier.se>\nSkickat: måndag\nÄmne: Faktura 42",
        ),
        ("VL: Lasku 42", "Lähettäjä: Toimittaja <bill@supplier.fi>\nLähetetty: maanantai"),
        ("PD: Faktura 42", "Od: Dostawca <bill@supplier.pl>\nWysłano: poniedziałek"),
    ],
)
def test_outlook_forwards_in_other_languages_keep_the_forwarded_message(
    subject: str, header: str
) -> None:
    # Regression: "I:" (Italian), "VB:" (Swedish), "VL:" (Finnish), "PD:" (Polish) were
    # no forward prefixes: the forwarded invoice below its header block was cut as
    # quoted history, and "can you pay this?" reached the model without it.
    body = f"Can you pay this?\n\n________________________________\n{header}\n\nIBAN DE00 42\n"
    assert is_forward_subject(subject)
    kept = strip_reply(body, forward=is_forward_subject(subject))
    assert "IBAN DE00 42" in kept and kept.startswith("Can you pay this?")


@pytest.mark.parametrize(
    "attribution",
    [
        "сб, 28 нояб. 2026 г. в 19:23, My Assistant <bot@example.com>:",
        "2026年11月28日(土) 19:17 My Assistant <bot@example.com>:",
        "My Assistant <bot@example.com> 于2026年11月28日周六 19:17写道：",
        "2026년 11월 28일 (토) 오후 7:17, My Assistant <bot@example.com>님이 작성:",
        "My Assistant <bot@example.com>, 28 Kas 2026 Cmt, 19:17 tarihinde şunu yazdı:",
        "so 28. 11. 2026 v 19:17 odesílatel My Assistant <bot@example.com> napsal:",
        "la 28.11.2026 klo 19.17 My Assistant (<bot@example.com>) kirjoitti:",
    ],
)
def test_gmail_attributions_in_other_languages_are_not_the_owners_text(
    attribution: str,
) -> None:
    # Regression: the quoted lines went, the "wrote:" line above them stayed in the
    # stored turn (Russian, Japanese, Chinese, Korean, Turkish, Czech, Finnish).
    body = f"Да, спасибо.\n\n{attribution}\n\n> What time suits you?\n> Tomorrow?\n"
    assert strip_reply(body) == "Да, спасибо."
    # an address and a colon with no quote below is the owner's own words
    own = "Please write to Anna <anna@example.net>:\nshe has the keys."
    assert strip_reply(own) == own


def test_a_forward_without_a_marker_keeps_the_forwarded_message() -> None:
    # Outlook forwards with the header block of a reply: only the subject ("FW:") tells.
    body = (
        "FYI, please book it.\n"
        "\n"
        "________________________________\n"
        "From: Alice Example <alice@example.net>\n"
        "Sent: Monday, January 13, 2025 6:02 PM\n"
        "To: Jane Doe <jane@example.com>\n"
        "Subject: Dinner on Friday\n"
        "\n"
        "Dinner at 8pm on Friday.\n"
    )
    assert strip_reply(body) == "FYI, please book it."  # as a reply: history
    kept = strip_reply(body, forward=True)
    assert kept.startswith("FYI, please book it.\n\n________________________________\nFrom: Alice")
    assert kept.endswith("Dinner at 8pm on Friday.")


OUTLOOK_ANDROID_HTML = (
    '<div>The morning one.</div><div id="ms-outlook-mobile-signature"><div>Get '
    '<a href="https://aka.ms/AAb9ysg">Outlook for Android</a></div></div>'
    '<hr style="display:inline-block;width:98%" tabindex="-1"><div id="divRplyFwdMsg">'
    "<b>From:</b> My Assistant &lt;bot@example.com&gt;<br><b>Sent:</b> Tuesday, "
    "January 14, 2025 9:15:00 AM<br><b>To:</b> Owner &lt;owner@example.org&gt;<br>"
    "<b>Subject:</b> Re: Trip<div>&nbsp;</div></div><div>Lisbon has two trains a day.</div>"
)


def test_outlook_mobile_s_signature_with_its_link_and_in_other_languages() -> None:
    # Regression (session 26): Outlook for Android sends HTML alone, and its signature
    # became "Get Outlook for Android <https://aka.ms/...>" (the link after a space),
    # which was kept in the turn; so were its German, Spanish, ... forms.
    msg = EmailMessage()
    msg["From"] = "owner@example.org"
    msg["Subject"] = "Re: Trip"
    msg.set_content(OUTLOOK_ANDROID_HTML, subtype="html")
    assert strip_reply(parse_message(msg.as_bytes()).text) == "The morning one."
    for signature in (
        "Outlook für Android herunterladen <https://aka.ms/ghei36>",
        "Obtener Outlook para iOS<https://aka.ms/o0ukef>",
        "Télécharger Outlook pour Android",
    ):
        assert strip_reply(f"The morning one.\n\n{signature}") == "The morning one.", signature
    # a person's words about it stay
    asked = "Does this work with Outlook for Android?"
    assert strip_reply(asked) == asked
