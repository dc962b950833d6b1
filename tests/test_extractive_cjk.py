"""Offline notes and titles of conversations in Chinese, Japanese, Korean and Thai
(bot/extractive.py, bot/keyword_titles.py): sentences end at "。！？", the notes keep
them, and no title is a whole run of characters."""

from __future__ import annotations

import unicodedata

from bot.extractive import extractive_abbreviation, sentences
from bot.keyword_titles import keyword_title, keyword_topics

MEETING = [
    (
        "user",
        "来週の月曜日に東京で会議があります。新しいプロジェクトの予算を決めなければなりませ"
        "ん！資料はもう準備しましたか？",
        "太郎",
    ),
    ("assistant", "はい、資料は準備しました。予算は五百万円を提案します。", "AI"),
    ("user", "ありがとう。では予算は五百万円で決定しましょう。", "太郎"),
]


def test_sentences_end_at_full_width_stops() -> None:
    assert sentences("東京に行きました。楽しかった！また行く？はい") == [
        "東京に行きました。",
        "楽しかった！",
        "また行く？",
        "はい",
    ]
    # English is split as before: a stop inside a token is part of the sentence
    assert sentences("Version 2.14 works. Really?Yes") == ["Version 2.14 works.", "Really?Yes"]


def test_notes_of_a_japanese_conversation_hold_its_sentences() -> None:
    notes = extractive_abbreviation(MEETING)
    assert "Key points:" in notes
    assert "予算は五百万円を提案します。" in notes
    assert "Open questions: 太郎: 資料はもう準備しましたか？" in notes


def test_a_long_run_without_spaces_is_clipped_in_the_notes() -> None:
    long = "".join(chr(0x4E00 + 7 * i) for i in range(300))  # 300 distinct characters
    notes = extractive_abbreviation([("user", long + "。", "太郎"), ("user", long[::-1], "太郎")])
    line = next(x for x in notes.splitlines() if x.startswith("Key points"))
    assert long[:80] + "…" in line
    assert len(line) < 200 + len("Key points: ") + 2 * len("太郎: ")


def test_a_title_is_never_a_run_of_characters() -> None:
    mixed = [
        ("user", "iPhone用の新しいケースを買いました。とても気に入っています。", "太郎"),
        ("assistant", "iPhoneケースの購入おめでとうございます。", "AI"),
    ]
    # was "iPhone用の新しいケースを買いました iPhoneケースの購入おめでとうございます"
    assert keyword_title(mixed) == "Chat About iPhone"
    assert keyword_topics(mixed) == ["iphone", "ケース"]  # the katakana term comes back


def test_a_conversation_without_latin_words_is_titled_by_its_opening() -> None:
    assert keyword_title(MEETING) == "来週の月曜日に東京で会議があります"
    assert keyword_title([("user", "ก" * 300, None)]) == "ก" * 20 + "…"
    assert keyword_title([("user", "서울에서 친구를 만났어", None)]) == "서울에서 친구를 만났어"
    assert keyword_title([("user", "hi", None)]) == "General Conversation"


def test_chinese_and_japanese_conversations_get_offline_topics() -> None:
    # Regression: the keywords read Latin words only, so a conversation in Chinese or
    # Japanese had no offline topic at all. Its recurring terms are its topics now.
    tower = [
        ("user", "我们下周去东京塔看夜景吧。东京塔晚上很漂亮。", "小明"),
        ("assistant", "好的，东京塔的门票我来买。夜景一定很美。", "AI"),
    ]
    assert keyword_topics(tower) == ["东京塔", "夜景"]  # not "东京" and "京塔" apart
    assert keyword_title(tower) == "我们下周去东京塔看夜景吧"
    topics = keyword_topics(MEETING)
    assert "予算" in topics and "資料" in topics
    # kana particles and function characters are no topic
    assert not [t for t in topics if any("\u3040" <= c <= "\u309f" for c in t)]
    assert keyword_topics([("user", "我们的我们的", None)]) == []


def test_a_korean_conversation_gets_offline_topics_without_its_particles() -> None:
    # Regression: a Korean word carries its particles and endings ("식당이", "회사에",
    # "예약했어요"), so no word came back spelled the same way and a Korean conversation
    # had no offline topic at all.
    booking = [
        ("user", "금요일 저녁에 이탈리아 식당 예약하고 싶어요", None),
        ("assistant", "시내에 있는 이탈리아 식당이 좋아요. 두 명 예약할까요?", None),
        ("user", "네, 금요일에 이탈리아 식당 두 명 예약해 주세요", None),
    ]
    assert keyword_topics(booking) == ["이탈리아", "금요일", "식당", "예약"]
    friend = [
        ("user", "어제 서울에서 친구를 만났어요. 친구가 새 회사에 취직했대요.", None),
        ("assistant", "와, 축하해요! 친구는 어떤 회사에 들어갔어요?", None),
        ("user", "게임 회사예요. 친구가 게임을 정말 좋아해서 잘 됐어요. 서울 강남에 있대요.", None),
    ]
    topics = keyword_topics(friend)
    assert topics[:2] == ["친구", "회사"] and "서울" in topics
    assert "친구가" not in topics and "회사에" not in topics  # a particle is no topic
    # decomposed syllables (as a macOS keyboard may send them) read the same
    decomposed = [(r, unicodedata.normalize("NFD", t), s) for r, t, s in booking]
    assert keyword_topics(decomposed) == keyword_topics(booking)
    # greetings, pronouns and the commonest verbs are no topic
    assert keyword_topics([("user", "안녕하세요 안녕하세요 정말 정말 있어요 있어요", None)]) == []
