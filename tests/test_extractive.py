"""Offline extractive abbreviation, keyword titles and topics: deterministic and bounded."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from bot.extractive import (
    HEADER,
    MAX_CHARS,
    MAX_WORD_CHARS,
    entities,
    extractive_abbreviation,
)
from bot.keyword_titles import kebab, keyword_title, keyword_topics

TURNS = [
    ("user", "Hi there! How are you?", "Owner"),
    ("assistant", "Hello! I'm fine, thanks.", "Assistant"),
    (
        "user",
        "We need to migrate the billing database from Postgres 12 to Postgres 16 before "
        "the March 15 deadline.",
        "Owner",
    ),
    (
        "assistant",
        "The billing database migration can use logical replication so the downtime stays "
        "under five minutes. Sarah Chen from the platform team ran the last upgrade.",
        "Assistant",
    ),
    (
        "user",
        "Ok. We decided to schedule the billing migration for the weekend of March 8.",
        "Owner",
    ),
    (
        "assistant",
        "Should the reporting replicas of the billing database move at the same time?",
        "Assistant",
    ),
    ("user", "Thanks a lot!", "Owner"),
    ("assistant", "You're welcome. Bye!", "Assistant"),
]


def test_abbreviation_shape_and_content() -> None:
    text = extractive_abbreviation(TURNS)
    lines = text.splitlines()
    assert lines[0] == HEADER
    assert lines[1] == "Participants: Owner, Assistant."
    body = "\n".join(lines[1:])
    assert "Postgres 16" in body and "March 15" in body
    assert any(line.startswith("Decisions:") and "decided" in line for line in lines)
    assert any(line.startswith("Open questions:") and "replicas" in line for line in lines)
    assert "Sarah Chen" in text
    # no pleasantries
    for pleasantry in ("How are you", "thanks", "Bye", "welcome", "Hi there"):
        assert pleasantry.lower() not in body.lower(), pleasantry
    assert len(text.split()) <= 200


def test_a_decision_written_as_a_label_is_a_decision() -> None:
    # "Decision: restic nightly" landed under Key points: the pattern knew "decided" and
    # "decide", not the noun an owner writes as a label.
    turns = [
        ("user", "What should the NAS backup schedule be?", "Owner"),
        ("assistant", "Nightly with restic, or weekly with rsync snapshots.", "Assistant"),
        ("user", "Decision: restic nightly at 02:00 to the offsite bucket.", "Owner"),
        ("assistant", "Noted; the first run is tonight.", "Assistant"),
    ]
    lines = extractive_abbreviation(turns).splitlines()
    decisions = next(line for line in lines if line.startswith("Decisions:"))
    assert "restic nightly at 02:00" in decisions


def test_abbreviation_length_bounded_for_long_conversations() -> None:
    long_turns = [
        (
            "user" if i % 2 == 0 else "assistant",
            f"Topic number {i} covers the Kubernetes cluster autoscaler settings for node pool "
            f"pool-{i} and the Grafana dashboard alerting thresholds we reviewed on day {i}.",
            None,
        )
        for i in range(80)
    ]
    text = extractive_abbreviation(long_turns)
    assert 100 <= len(text.split()) <= 200


def test_deterministic() -> None:
    assert extractive_abbreviation(TURNS) == extractive_abbreviation(list(TURNS))
    assert keyword_title(TURNS) == keyword_title(list(TURNS))
    assert keyword_topics(TURNS) == keyword_topics(list(TURNS))


def test_empty_and_trivial() -> None:
    assert extractive_abbreviation([]) == ""
    title = keyword_title([("user", "hi", None)])
    assert 2 <= len(title.split()) <= 6
    assert keyword_topics([("user", "hi", None)]) == []


def test_title_rules() -> None:
    title = keyword_title(TURNS)
    words = title.split()
    assert 2 <= len(words) <= 6
    assert len(title) <= 80
    assert all(w[0].isupper() for w in words)
    assert "billing" in title.lower()
    assert "owner" not in title.lower()
    long_words = [
        ("user", " ".join(["supercalifragilistic" + str(i)] * 3), None) for i in range(10)
    ]
    assert len(keyword_title(long_words)) <= 80


def test_titles_and_topics_skip_words_without_a_subject() -> None:
    turns = [
        ("user", "We need to renew the passport before the Japan trip in March", None),
        ("user", "The passport office in Leeds has appointments on Tuesdays", None),
        ("user", "Please remember that Tom needs a passport photo", None),
    ]
    title = keyword_title(turns)
    assert "Passport" in title.split() and "Japan" in title.split()
    assert not {"Need", "Needs", "Please", "Remember"} & set(title.split())
    assert not {"need", "needs", "please", "remember"} & set(keyword_topics(turns))


def test_topics_kebab_case() -> None:
    topics = keyword_topics(TURNS)
    assert topics and len(topics) <= 4
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", t) for t in topics)
    assert "billing" in topics
    assert kebab("Sarah Chen!") == "sarah-chen"


def test_a_topic_keeps_its_words_in_every_script() -> None:
    # Regression: topics kept a-z and 0-9 only ("Café" -> "caf", a Russian or Hindi
    # keyword -> no topic), and the model's topics lost Devanagari vowel signs and were
    # cut at 40 code points inside a character.
    assert kebab("Café Müller") == "café-müller"
    assert kebab("сервер Мониторинг") == "сервер-мониторинг"
    assert kebab("हिंदी फ़िल्म") == "हिंदी-फ़िल्म"
    assert kebab("می\u200cخواهم") == "می\u200cخواهم"
    assert kebab("under_score / slash") == "under-score-slash"
    assert kebab("x" * 39 + "\u0915\u093f") == "x" * 39


def test_entities_skip_greetings_and_participants() -> None:
    turns = [
        ("user", "Hey Mel! I met Sarah Chen at the Berlin office.", "Caroline"),
        ("assistant", "Thanks Caroline, did Sarah Chen like Berlin?", "Melanie"),
    ]
    names = entities(turns)
    assert names[0] == "Sarah Chen"
    assert "Berlin" in names
    assert not any(n in ("Hey Mel", "Mel", "Caroline", "Thanks Caroline") for n in names)


def test_numbers_with_stops_stay_whole_and_never_crash() -> None:
    # Regression: a stop inside a number split the sentence there ("release 2." /
    # "14 ..."), and a word of the pieces ("19.") missing from the turn's own words
    # divided by a document frequency of 0: the conversation never got its notes.
    for text in (
        "The meeting moved to 10.30 today.",
        "Ticket price is 19.99 dollars.",
        "My weight is 72.5 kg.",
        "The server IP address is 10.0.4.17 now.",
        "The invoice total was 1,249.50 euros including the 3.5 percent fee.",
        "The bug was changed in release 2.14 and we roll back to release 2.13 tonight.",
    ):
        notes = extractive_abbreviation([("user", text, "Ann")])
        assert f"Key points: Ann: {text}" in notes


def test_a_line_without_a_stop_is_a_sentence() -> None:
    turns = [("user", "Booked the ferry to Hydra for Friday\nThe hotel is still open", "Ann")]
    notes = extractive_abbreviation(turns)
    assert "Booked the ferry to Hydra for Friday" in notes
    assert "The hotel is still open" in notes


def test_a_huge_line_without_a_stop_is_handled_in_linear_time() -> None:
    # The old sentence pattern backtracked over every start of such a line (quadratic,
    # holding the GIL: the whole daemon froze, for hours on a pasted log of a few MB).
    # Run in a child process so a regression fails here instead of hanging the suite.
    code = (
        "from bot.extractive import extractive_abbreviation\n"
        "from bot.keyword_titles import keyword_title\n"
        "text = 'word ' * 400_000 + '\\nend of the log'\n"
        "assert extractive_abbreviation([('user', text, 'Ann')])\n"
        "assert keyword_title([('user', text, 'Ann')])\n"
    )
    # ~7 s on an idle machine, over 60 at a load of 20; the quadratic pattern took hours
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


# -- offline titles over a realistic corpus --------------------------------------------
# Offline, the assistant's turns are readouts kept out of naming, so a conversation is
# named from the owner's own messages, fillers and all. Before session 15 these were
# titled "Chickpeas Spinach Curry Cook", "Today Tired Long Week", "Fujifilm X-t5 Sony
# Street", "Stripe User_id Payload Metadata" and "Perfect Garage Brakes Remind".
def _owner(*texts: str) -> list[tuple[str, str, str | None]]:
    return [("user", text, "Dana") for text in texts]


TITLED = {
    "Nginx Server Socket File": _owner(
        "Hi, the nginx server keeps returning 502 since this morning",
        "I checked and gunicorn is running but the socket file /run/app.sock is missing",
        "Yeah really weird. Something must have deleted it after the reboot",
        "Thanks, I restarted gunicorn and the socket came back, nginx works again",
        "Should I add RuntimeDirectory to the systemd unit so it survives reboots?",
    ),
    "Chickpea Curry Spinach Coconut": _owner(
        "What should I cook tonight? I have chickpeas, spinach and some coconut milk",
        "A curry sounds good. How long do the chickpeas need if they're canned?",
        "Really? Only 15 minutes? Great",
        "Do I add the spinach at the end so it doesn't get mushy?",
        "Thanks, the chickpea curry turned out really well",
    ),
    "Long Week": _owner(
        "Hey, how are you doing today?",
        "Yeah I'm good thanks, just tired",
        "Really long week. Something always comes up",
        "Ok cool, thanks for listening",
        "Yeah, talk later",
    ),
    "Fujifilm X-T5 Sony Street": [
        ("user", "Hi", "Dana"),
        ("assistant", "Hello! How can I help?", None),
        ("user", "I want to know whether I should get the Fujifilm X-T5 or the Sony A7 IV", "Dana"),
        ("assistant", "The Fujifilm X-T5 has a 40 MP sensor; the Sony A7 IV is full frame.", None),
        ("user", "I mostly shoot street photography and travel", "Dana"),
        ("assistant", "For street photography the X-T5's dials are really nice.", None),
        ("user", "Thanks, something compact really matters. Yeah I'll get the Fujifilm", "Dana"),
    ],
    "Stripe user_id Webhook Payload": _owner(
        "my python script crashes with KeyError: 'user_id' when parsing the webhook payload",
        "the payload comes from Stripe, it's a checkout.session.completed event",
        "oh I see, user_id is inside metadata, not at the top level",
        "yeah fixed it with payload['data']['object']['metadata']['user_id']",
        "thanks, can you show how to verify the Stripe signature too?",
    ),
    "Garage Brakes Dentist Appointment": _owner(
        "Ok, Perfect. Can you remind me about the dentist appointment?",
        "Yeah, Really appreciate it. Something came up with the car too",
        "Thanks, Honestly the garage said the brakes need replacing",
        "Alright, Sounds good. Book the garage for the brakes then",
        "Cheers, Awesome",
    ),
    "Lisbon Alfama Sintra Trip": _owner(
        "Hey! Really excited, we're finally planning the trip to Lisbon in May",
        "Something cheap for flights would be good, maybe TAP from Berlin?",
        "Yeah the hotel near Alfama looked nice. Really close to the tram",
        "Thanks! Can you also check day trips to Sintra?",
        "Ok so Lisbon 12-19 May, hotel in Alfama, one day in Sintra",
    ),
}


def test_offline_titles_name_the_subject() -> None:
    from bot.lifecycle.naming import clean_title

    for expected, turns in TITLED.items():
        title = keyword_title(turns)
        assert clean_title(title) == expected, (expected, title)
        assert keyword_title(list(reversed(turns))).split() != []  # never empty


def test_offline_titles_skip_fillers_verbs_and_repeats() -> None:
    for turns in TITLED.values():
        words = keyword_title(turns).split()
        assert 2 <= len(words) <= 6
        lowered = [w.lower() for w in words]
        # Interjections, discourse fillers, light verbs, dates: never a title word.
        for weak in ("really", "thanks", "something", "yeah", "perfect", "honestly", "cook"):
            assert weak not in lowered, (weak, words)
        for weak in ("today", "tonight", "may", "remind", "deleted", "listening", "near"):
            assert weak not in lowered, (weak, words)
        # One word per stem: "chickpeas" and "chickpea" are the same subject.
        stems = [w.rstrip("s") for w in lowered]
        assert len(stems) == len(set(stems)), words


def test_a_word_used_as_a_noun_is_not_taken_for_a_verb() -> None:
    turns = _owner(
        "The boiler check is booked for Monday",
        "Did the check include the pressure valve?",
        "The plumber will check the pressure valve again",
    )
    title = keyword_title(turns)
    assert "Check" in title.split() and "Valve" in title.split(), title


def test_one_subject_word_still_makes_a_title() -> None:
    assert keyword_title(_owner("hi!", "curry?", "thanks")) == "Chat About Curry"
    assert keyword_title(_owner("hi!", "thanks, bye")) == "General Conversation"


def test_offline_topics_skip_dates_and_keep_identifiers() -> None:
    topics = keyword_topics(TITLED["Stripe user_id Webhook Payload"])
    assert topics[:2] == ["stripe", "user-id"] or topics[:2] == ["stripe", "user_id"]
    assert "may" not in keyword_topics(TITLED["Lisbon Alfama Sintra Trip"])


def test_a_speaker_label_in_the_text_is_not_repeated_or_taken_for_a_name() -> None:
    # Imported chat logs carry "Name: " in front of each line; the notes add the speaker
    # themselves, and the word after the label is a sentence start, not a name.
    turns = [
        ("user", "Anna: Congrats on the new job at the harbour office!", "Anna"),
        ("assistant", "Ben: Thanks! I start on Monday with Laura Diaz from logistics.", "Ben"),
        ("user", "Anna: Yep, the harbour office is lucky to have you there.", "Anna"),
        ("assistant", "Ben: Laura Diaz says the harbour office opens a second site soon.", "Ben"),
    ]
    notes = extractive_abbreviation(turns)
    assert "Anna: Anna:" not in notes and "Ben: Ben:" not in notes
    names = entities(turns)
    assert names[0] == "Laura Diaz" and not {"Congrats", "Yep"} & set(names)
    # A colon that is not the speaker's own label stays.
    assert "Note: " in extractive_abbreviation(
        [("user", "Note: the harbour office opens soon.", "Anna")] * 4
    )


def test_an_opening_title_keeps_its_last_character_whole() -> None:
    # Regression: a Thai opening cut at 20 code points kept a consonant without the tone
    # mark after it ("ที่" is three code points, one character).
    thai = "ที่" * 10 + "ไป"
    title = keyword_title([("user", thai, None)])
    assert title == "ที่" * 6 + "…"


OTHER_SCRIPTS = {
    "russian": [
        ("user", "Привет! Я хочу поехать в Москву. Какие билеты на поезд лучше купить?", "A"),
        ("assistant", "Билеты на поезд Сапсан стоят около трёх тысяч рублей.", "AI"),
        ("user", "Отлично, куплю билеты на Сапсан.", "A"),
    ],
    "greek": [
        ("user", "Γεια! Θέλω να μαγειρέψω μουσακά. Τι υλικά χρειάζομαι για τον μουσακά;", "A"),
        ("assistant", "Για τον μουσακά χρειάζεσαι μελιτζάνες, κιμά και μπεσαμέλ.", "AI"),
        ("user", "Ωραία, θα αγοράσω μελιτζάνες και κιμά.", "A"),
    ],
    "hindi": [
        ("user", "नमस्ते! मुझे दिल्ली की यात्रा के लिए ट्रेन टिकट बुक करना है।", "A"),
        ("assistant", "दिल्ली के लिए राजधानी एक्सप्रेस ट्रेन अच्छी है। टिकट ऑनलाइन बुक करें।", "AI"),
        ("user", "ठीक है, मैं राजधानी एक्सप्रेस का टिकट बुक करूँगा।", "A"),
    ],
}
EXPECTED_TOPICS = {
    "russian": {"билеты", "сапсан", "поезд"},
    "greek": {"μουσακά", "μελιτζάνες", "κιμά"},
    "hindi": {"टिकट", "दिल्ली", "ट्रेन"},
}


@pytest.mark.parametrize("language", sorted(OTHER_SCRIPTS))
def test_conversations_in_other_scripts_get_offline_topics_and_a_title(language: str) -> None:
    # Regression: the keywords were Latin words only, so a conversation in Russian,
    # Greek or Hindi had no offline topic and was titled "General Conversation".
    turns = OTHER_SCRIPTS[language]
    topics = keyword_topics(turns)
    assert EXPECTED_TOPICS[language] <= set(topics), topics
    assert all(t == kebab(t) for t in topics)
    # their function words ("что", "και", "के") are no topic
    assert not {"что", "это", "και", "για", "के", "की", "है"} & set(topics)
    title = keyword_title(turns)
    assert title != "General Conversation" and title.split(), title
    assert set(title.lower().split()) & EXPECTED_TOPICS[language], title
    # a Devanagari word is read whole, through its vowel signs and virama
    assert "ट्रे" not in topics and "ट" not in topics


def test_a_hyphenated_name_stays_whole() -> None:
    # Regression: the name pattern stopped at the hyphen, "Rust-Oleum" came out as the two
    # names "Rust" and "Oleum" (and "Jean-Luc Picard" as "Jean", "Luc Picard").
    turns = [("user", "We bought Rust-Oleum primer and asked Jean-Luc Picard about it.", "Ann")]
    assert entities(turns) == ["Rust-Oleum", "Jean-Luc Picard"]


def test_a_sentences_first_word_is_not_glued_to_a_name() -> None:
    # Regression: a run of capitals at a sentence start kept its first word, whatever it
    # was: "Bought Rust-Oleum primer at Hornbach" gave the name "Bought Rust".
    turns = [
        ("user", "Bought Rust-Oleum primer at Hornbach for 24 euros.", "Ann"),
        ("user", "Yesterday Hornbach had no brushes left.", "Ann"),
    ]
    assert entities(turns) == ["Hornbach", "Rust-Oleum"]
    # A quoted title opening a sentence is a name all the same.
    quoted = [("user", 'Yeah! "Brave" by Sara Bareilles means a lot to me.', "Ann")]
    assert entities(quoted) == ["Brave", "Sara Bareilles"]


def test_a_sentences_first_word_known_as_a_name_counts() -> None:
    # "Paris" opens a sentence once and is written inside one once: the conversation
    # names it twice, more often than "Lyon", and a recurring run there stays whole.
    turns = [
        ("user", "We drove through Lyon and Paris.", "Ann"),
        ("user", "Paris was lovely in spring.", "Ann"),
        ("user", "Anna Schmidt sent the contract.", "Ann"),
        ("user", "Anna Schmidt wants it signed.", "Ann"),
    ]
    assert entities(turns) == ["Paris", "Anna Schmidt", "Lyon"]


def test_a_chat_of_short_messages_keeps_what_they_say_in_its_notes() -> None:
    # Regression: a sentence under four words was a pleasantry, so a chat of short
    # messages ("NAS backup", "Restic to B2") got notes of its participants alone:
    # nothing for the notes' vector or keyword search to find it by.
    turns = [
        ("user", "NAS backup", None),
        ("user", "Restic to B2", None),
        ("user", "nightly at 3", None),
        ("user", "ok thanks", None),
    ]
    notes = extractive_abbreviation(turns)
    assert "Key points: NAS backup. Restic to B2. nightly at 3." in notes, notes
    assert "thanks" not in notes
    one_word = extractive_abbreviation([("user", "Kubernetes", None)] * 5)
    assert one_word.splitlines()[-1] == "Key points: Kubernetes.", one_word
    # pleasantries alone are still no key point
    assert "Key points" not in extractive_abbreviation([("user", "hi", None), ("user", "ok", None)])


def test_chat_messages_without_a_full_stop_do_not_run_together_in_the_notes() -> None:
    # Regression: a chat message seldom ends with a full stop, and the key points read
    # as one sentence: "Meeting with Herr Schmidt am Montag Bitte das Protokoll schicken".
    turns = [
        ("user", "Meeting with Herr Schmidt am Montag", None),
        ("user", "Bitte das Protokoll schicken", None),
        ("user", "Das Budget ist 5000 Euro, Herr Schmidt hat zugestimmt!", None),
    ]
    notes = extractive_abbreviation(turns)
    assert "am Montag. Bitte das Protokoll schicken. Das Budget" in notes, notes
    assert "zugestimmt!" in notes and "zugestimmt!." not in notes


def test_a_pasted_blob_is_cut_in_the_notes() -> None:
    # Regression (session 40): the notes were bounded in words, and a 1 MB base64 blob
    # (no space: one "word") went into them whole, 1,000,319 characters stored,
    # embedded and returned with every search result.
    blob = "QUJD" * 250_000
    turns = [
        (
            "user",
            f"Here is the signed release bundle, keep it. {blob} Thanks for keeping it.",
            "Ann",
        ),
        ("assistant", "Kept: the signed release bundle for the audit.", None),
        ("user", "We decided to ship the release on Friday after the review.", "Ann"),
    ]
    notes = extractive_abbreviation(turns)
    assert len(notes) < 1000
    assert " " + blob[:MAX_WORD_CHARS] + "… Thanks for keeping it." in notes
    assert "Decisions: Ann: We decided to ship the release on Friday" in notes


def test_the_notes_are_bounded_in_characters() -> None:
    # forty words of sixty characters each, a sentence of 2,400 characters, in every turn
    turns = [
        ("user", " ".join(f"{k:02d}{n:02d}" + "z" * 56 for n in range(40)) + ".", "Ann")
        for k in range(30)
    ]
    notes = extractive_abbreviation(turns)
    assert "Key points: " in notes
    assert len(notes) <= MAX_CHARS + len(HEADER) + 100  # the header and participants


def test_a_capital_before_a_pasted_run_is_no_name() -> None:
    run = "Q" + "u" * 100_000
    turns = [
        ("user", f"We met {run} at the fair with Margot.", "Ann"),
        ("user", f"Margot said {run} is coming back.", "Ann"),
    ]
    assert entities(turns) == ["Margot"]
    assert "Entities: Margot." in extractive_abbreviation(turns)
