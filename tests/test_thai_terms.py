"""Offline topics and titles of Thai conversations (bot/thai_terms.py): Thai writes no
space between words, and a Thai conversation had no offline topic and its opening, cut
at 20 characters, as the title."""

from __future__ import annotations

from bot.index import ConversationRecord
from bot.keyword_titles import keyword_title, keyword_topics
from bot.lifecycle.naming import Namer
from bot.thai_terms import thai_terms

# Booking a Japanese restaurant near Siam for Saturday, a table at 7 pm, and parking.
RESTAURANT = [
    ("user", "สวัสดีครับ ผมอยากจองร้านอาหารสำหรับวันเสาร์นี้ครับ", None),
    ("assistant", "ได้เลยครับ คุณอยากได้ร้านอาหารแบบไหนครับ", None),
    ("user", "ร้านอาหารญี่ปุ่นใกล้สยามครับ ไปกันสี่คน", None),
    ("assistant", "มีร้านอาหารญี่ปุ่นที่สยามหลายร้านครับ จะจองโต๊ะกี่โมงดีครับ", None),
    ("user", "จองโต๊ะหนึ่งทุ่มครับ แล้วช่วยหาที่จอดรถใกล้สยามด้วย", None),
    (
        "assistant",
        "ได้ครับ จองโต๊ะหนึ่งทุ่มที่ร้านอาหารญี่ปุ่น และที่จอดรถอยู่ที่สยามพารากอนครับ",
        None,
    ),
]

# Mother is unwell: a doctor's appointment at the hospital, a gift sent at the post
# office, whether her health insurance covers the hospital.
HOSPITAL = [
    ("user", "แม่ไม่สบายต้องไปโรงพยาบาลพรุ่งนี้ค่ะ", None),
    ("assistant", "ขอให้คุณแม่หายเร็วๆ นะคะ ต้องการให้ช่วยนัดหมอที่โรงพยาบาลไหมคะ", None),
    ("user", "ค่ะ ช่วยนัดหมอตอนเช้าให้หน่อย แล้วส่งของขวัญไปที่ไปรษณีย์ด้วย", None),
    ("assistant", "นัดหมอเก้าโมงเช้าแล้วค่ะ ส่วนของขวัญส่งที่ไปรษณีย์ใกล้บ้านได้เลยค่ะ", None),
    ("user", "ขอบคุณค่ะ ประกันสุขภาพของแม่ใช้ที่โรงพยาบาลนี้ได้ไหม", None),
    ("assistant", "ประกันสุขภาพใช้ได้ค่ะ แต่ต้องเอาบัตรประกันไปด้วยนะคะ", None),
]


def test_a_thai_conversation_gets_offline_topics() -> None:
    # Regression: no topic at all (no spaces between Thai words, no recurring word).
    assert keyword_topics(RESTAURANT) == ["ร้านอาหาร", "สยาม", "จองโต๊ะ", "ที่จอดรถ"]
    assert keyword_topics(HOSPITAL) == ["โรงพยาบาล", "ประกันสุขภาพ", "นัดหมอ", "ของขวัญ"]


def test_a_thai_conversation_gets_a_keyword_title() -> None:
    # Regression: the title was the opening cut at 20 characters, inside a word
    # ("สวัสดีครับ ผมอยากจองร้…", "hello, I want to book a res…").
    assert keyword_title(RESTAURANT) == "ร้านอาหาร สยาม จองโต๊ะ"
    assert keyword_title(HOSPITAL) == "โรงพยาบาล ประกันสุขภาพ นัดหมอ"
    assert keyword_title(RESTAURANT, max_chars=16) == "ร้านอาหาร สยาม"


def test_function_words_and_pieces_of_them_are_no_terms() -> None:
    terms = thai_terms(HOSPITAL, limit=20)
    # polite particles, pronouns, "can ... ?", and "รับ" of "ครับ" never come back
    for word in ("ค่ะ", "นะคะ", "ได้ไหม", "ด้วย", "ที่"):
        assert word not in terms
    assert "รับ" not in thai_terms(RESTAURANT, limit=20)
    # a word that only begins like a function word keeps it ("ไป" go, "ของ" of)
    assert {"ไปรษณีย์", "ของขวัญ"} <= set(terms)
    # a phrase through a function word ("จองโต๊ะหนึ่งทุ่ม", book a table at 7 pm) is
    # not a term; its parts are
    assert "จองโต๊ะหนึ่งทุ่ม" not in thai_terms(RESTAURANT, limit=20)
    greetings = [("user", "สวัสดีครับ ขอบคุณครับ ได้ไหมครับ", None)] * 2
    assert keyword_topics(greetings) == []
    assert thai_terms([("user", "ก" * 300, None)]) == []  # a string over and over
    assert keyword_title([("user", "ก" * 300, None)]) == "ก" * 20 + "…"  # the opening


def test_thai_beside_other_scripts() -> None:
    assert thai_terms([("user", "hello there", None)]) == []
    mixed = [*RESTAURANT, ("user", "Siam Paragon parking, Siam Paragon", None)]
    assert keyword_title(mixed).startswith("Siam Paragon")  # Latin words first, as before
    assert "ร้านอาหาร" in keyword_topics(mixed, limit=6)


async def test_offline_naming_of_a_thai_conversation() -> None:
    turns = [
        {"role": role, "content": text, "turnNumber": n // 2 + 1}
        for n, (role, text, _) in enumerate(HOSPITAL)
    ]
    record = ConversationRecord(id="conv-th", channel="web", created="", updated="")
    naming = await Namer(None).name(record, turns)
    assert naming.method == "keywords"
    assert naming.title == "โรงพยาบาล ประกันสุขภาพ นัดหมอ"
    assert naming.topics[:2] == ["โรงพยาบาล", "ประกันสุขภาพ"]
