"""Titles of one word and topics spelt with symbols, through the real SDK against the
local fake Messages API: a one-word title is asked for again once, then widened from the
model's topics (2-6 words, seed 000); "C++", "C#", "R&D" keep their sense as topics."""

from __future__ import annotations

import pytest

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.extractive import Turn
from bot.keyword_titles import keyword_topics
from bot.lifecycle import Lifecycle
from bot.lifecycle.prompts import NAMING_SYSTEM
from bot.lifecycle.titles import clean_title, clean_topics, one_word, topic_slug, widen_title
from bot.services import Services

FIRST = '{"title": "Kubernetes", "topics": ["kubernetes-upgrade", "helm"]}'

# (the model's answers in turn, requests expected, the title stored, its topics)
ONE_WORD_CASES: list[tuple[list[str | int], int, str, list[str]]] = [
    (  # asked again: the second answer, with its own topics
        [FIRST, '{"title": "Kubernetes Cluster Upgrade", "topics": ["kubernetes"]}'],
        2,
        "Kubernetes Cluster Upgrade",
        ["kubernetes"],
    ),
    (  # one word again: the topic that holds the word
        [FIRST, '{"title": "kubernetes.", "topics": ["k8s"]}'],
        2,
        "Kubernetes Upgrade",
        ["kubernetes-upgrade", "helm"],
    ),
    (  # the second request fails: the word and the first other topic
        ['{"title": "Kubernetes", "topics": ["helm-charts"]}', 529],
        2,
        "Kubernetes Helm Charts",
        ["helm-charts"],
    ),
    (  # no topics, and no JSON the second time: as the offline naming says it
        ['{"title": "Kubernetes"}', "A cluster chat."],
        2,
        "Chat About Kubernetes",
        [],
    ),
    (  # a script written without spaces: one "word" is a whole title
        ['{"title": "東京旅行計画", "topics": ["東京"]}'],
        1,
        "東京旅行計画",
        ["東京"],
    ),
    (  # two words are enough: asked once
        ['{"title": "Kubernetes Upgrade", "topics": ["helm"]}'],
        1,
        "Kubernetes Upgrade",
        ["helm"],
    ),
]


@pytest.fixture
def services(claude_services: Services) -> Services:
    return claude_services


async def name_once(
    services: Services,
    lifecycle: Lifecycle,
    fake: FakeAnthropicAPI,
    answers: list[str | int],
    channel: str = "web",
    **meta: str,
) -> tuple[str, list[str]]:
    """A conversation named at its 5th user message with ``answers`` (an int: that HTTP
    status); the requests it made are checked to be naming requests."""
    manager = services.conversations
    conv = (await manager.create(channel, channel_meta=meta)).id
    for n in range(1, 5):
        await manager.append_turn(conv, "user", f"Cluster upgrade step {n}?")
        await manager.append_turn(conv, "assistant", f"Step {n}: drain the node.")
    for answer in answers:
        if isinstance(answer, int):
            fake.push_error(answer)
        else:
            fake.push_text(answer)
    asked = len(fake.requests)
    await manager.append_turn(conv, "user", "And the helm charts?")
    await lifecycle.settle()
    prompts = [str(r.body["messages"][0]["content"]) for r in fake.requests[asked:]]
    assert all(NAMING_SYSTEM in str(r.body["system"]) for r in fake.requests[asked:])
    return conv, prompts


async def test_a_one_word_title_is_asked_again_then_widened(
    services: Services, fake_api: FakeAnthropicAPI, lifecycle: Lifecycle
) -> None:
    # Regression: "Kubernetes" was stored as the title though a title has 2-6 words.
    for answers, asked, title, topics in ONE_WORD_CASES:
        conv, prompts = await name_once(services, lifecycle, fake_api, answers)
        assert len(prompts) == asked, answers
        if asked == 2:
            assert 'titled it "Kubernetes", a single word' in prompts[1]
            assert prompts[1].startswith(prompts[0].removesuffix("JSON:"))
        rec = await services.conversations.require(conv)
        assert (rec.title, rec.topics, rec.last_named_turn) == (title, topics, 5), answers
        assert fake_api.pending == 0


async def test_topics_keep_the_sense_of_their_symbols(
    services: Services, fake_api: FakeAnthropicAPI, lifecycle: Lifecycle
) -> None:
    # Regression: "C++" and "C#" were both stored as "c", "R&D" as "r-d", ".NET" as
    # "net" and "Anna's Birthday" as "anna-s-birthday".
    answer = (
        '{"title": "Build Tooling Choices", "topics": ["C++", "C#", "R&D", ".NET",'
        ' "Anna\'s Birthday"]}'
    )
    conv, _ = await name_once(services, lifecycle, fake_api, [answer])
    rec = await services.conversations.require(conv)
    assert rec.topics == ["c-plus-plus", "c-sharp", "r-and-d", "dotnet", "annas-birthday"]


async def test_an_email_title_loses_the_reply_prefix_the_model_copied(
    services: Services, fake_api: FakeAnthropicAPI, lifecycle: Lifecycle
) -> None:
    # Regression: the model, told the thread's subject, answered "Re: Invoice for March"
    # and the conversation list showed the "Re:".
    answer = '{"title": "RE: Fwd: Invoice for March", "topics": ["invoice"]}'
    conv, prompts = await name_once(
        services, lifecycle, fake_api, [answer], "email", subject="Re: Invoice for March"
    )
    assert 'subject "Invoice for March"' in prompts[0]
    assert (await services.conversations.require(conv)).title == "Invoice for March"


@pytest.mark.parametrize(
    ("raw", "title"),
    [
        # Regression: "(march", "Vs.", "Wi-fi", "Follow-up"
        ("Trip planning (march 2026)", "Trip Planning (March 2026)"),
        ("Kubernetes vs. Nomad", "Kubernetes vs. Nomad"),
        ("wi-fi password reset", "Wi-Fi Password Reset"),
        ("follow-up on the invoice", "Follow-Up on the Invoice"),
        ("keeping backups up-to-date", "Keeping Backups Up-to-Date"),
        ("Rust-Oleum primer for the X-T5", "Rust-Oleum Primer for the X-T5"),
        # Regression: in capitals, words with digits were lowered for good ("covid-19")
        # and short small words kept their capitals ("Booking THE a380 Flight")
        ("COVID-19 VACCINE APPOINTMENT", "COVID-19 Vaccine Appointment"),
        ("BOOKING THE A380 FLIGHT", "Booking the A380 Flight"),
        ("IPV6 ROUTER CONFIG", "IPV6 Router Config"),
        ("WI-FI SETUP AT HOME", "Wi-Fi Setup at Home"),
        ("NAS BACKUP VS AWS", "NAS Backup vs AWS"),
    ],
)
def test_title_case_of_compounds_brackets_and_small_words(raw: str, title: str) -> None:
    assert clean_title(raw) == title


@pytest.mark.parametrize(
    ("topic", "slug"),
    [
        ("C++", "c-plus-plus"),
        ("Notepad++", "notepad-plus-plus"),
        ("C#", "c-sharp"),
        ("F# scripts", "f-sharp-scripts"),
        ("R&D", "r-and-d"),
        ("Rock & Roll", "rock-and-roll"),
        (".NET", "dotnet"),
        ("ASP.NET", "asp-net"),
        ("Node.js", "node-js"),
        ("GPT-4o", "gpt-4o"),
        ("Disney+", "disney-plus"),
        ("50% Off", "50-percent-off"),
        ("don’t panic", "dont-panic"),
        ("#1 Priority", "1-priority"),
        ("Server Monitoring!", "server-monitoring"),
        ("Café", "café"),
        # cut between words (it was cut inside one: "...-metaprogramming-and-co")
        ("C++ template metaprogramming and compile times", "c-plus-plus-template-metaprogramming"),
        ("a" * 50, "a" * 40),
    ],
)
def test_topic_slugs(topic: str, slug: str) -> None:
    assert topic_slug(topic) == slug
    assert clean_topics([topic]) == [slug]


def test_the_offline_topics_are_left_as_they_are() -> None:
    # The offline topics (bot.keyword_titles, read by the search benchmark) go through
    # clean_topics too: the symbols' rules must never change a slug already made.
    texts = [
        "Anna's C++ build broke again after the R&D merge, 50% of tests fail",
        "The .NET service and the Node.js gateway both log to Grafana",
        "C# or F#? Rock & Roll playlist for Anna's birthday, Disney+ for the kids",
        "Café Müller: reservation for 8, Priya asks about the Schmidt–Meyer invoice",
    ]
    turns: list[Turn] = [("user", text, "owner") for text in texts * 3]
    topics = keyword_topics(turns, limit=8)
    assert topics
    assert [topic_slug(t) for t in topics] == topics
    assert clean_topics(topics) == topics[:5]


def test_one_word_and_its_widening() -> None:
    assert one_word("Kubernetes") and one_word("NAS")
    assert not one_word("Server Plan") and not one_word("東京旅行計画")
    assert not one_word("ร้านอาหาร")  # Thai: no spaces between words
    assert widen_title("NAS", ["nas-backup", "raid"]) == "NAS Backup"
    assert widen_title("Kubernetes", ["kubernetes", "helm charts"]) == "Kubernetes Helm Charts"
    assert widen_title("Kubernetes", ["kubernetes"]) == "Chat About Kubernetes"
