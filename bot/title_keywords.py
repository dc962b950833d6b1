"""A conversation's subject words: names, nouns and identifiers, ranked (for titles).

:func:`ranked_words` (and :func:`keywords`, its words alone) reads turns given as ``(role,
content, sender)`` items; without a tagger, each word's class is guessed from general
English evidence around its uses (below). The titles and topics built from them are
:mod:`bot.keyword_titles`.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

from bot.extractive import EXTRA_STOP, Turn, sentences
from bot.fts_text import latin_of
from bot.search import STOP_WORDS
from bot.search.query import singular as stem

# Words that carry no subject in a title or a topic ("We need to renew the passport"
# named "Japan Passport Need Renew"). Only the keywords of titles and topics skip them:
# the notes' sentence scoring is left as it is.
TITLE_STOP = frozenset(
    "need needs needed want wants wanted please remember thing things stuff lot lots kind "
    "sort".split()
)


# -- keywords for titles and topics ----------------------------------------------------
# A title should name the subject: nouns, names and identifiers. Without a tagger the
# word class is guessed from general English evidence around each use of a word, never
# from a list of this or that conversation's words:
# - a word right after a subject pronoun or a modal ("I checked", "should I add", "can you
#   show") or before a particle ("came back", "comes up") is used as a verb; right after a
#   determiner or a number ("the socket", "15 minutes") as a noun. A word used more as a
#   verb than as a noun never names the subject, nor does an -ed/-ing/-ly form that is
#   never used as a noun ("deleted", "listening", "really").
# - a word capitalised inside a sentence (not after a greeting) is a name and is shown
#   as written; so is an identifier ("X-T5", "user_id", "RuntimeDirectory").
# - closed classes carry no subject whatever the conversation: interjections and
#   discourse fillers, deictic time words, vague nouns, light verbs (the latter only
#   while never used as a noun: "the check" is one).
_SUBJECTS = frozenset(
    "i you we they he she it someone somebody something everyone everybody everything "
    "nothing anyone anybody who i'll we'll you'll they'll i've we've you've i'd we'd "
    "you'd i'm we're you're they're it's that's".split()
)
_MODALS = frozenset(
    "can could will would should must might may shall do does did don't doesn't didn't "
    "can't couldn't won't wouldn't shouldn't let's lets please".split()
)
_DETERMINERS = frozenset(
    "the a an my your our their his her its this these those some any each every no "
    "another which whose".split()
)
_PARTICLES = frozenset("up out back down off away around".split())
# Skipped when looking back from a word for its subject or modal ("I just checked").
_LOOKBACK_SKIP = frozenset(
    "just also then already still never always really actually even maybe probably "
    "finally not usually often quickly".split()
)
FILLER_WORDS = frozenset(
    "yeah yep yup nope yes ok okay okey alright right sure thanks thank thx cheers sorry "
    "please perfect exactly absolutely anyway anyways btw well hmm hm uh um oh ah wow "
    "lol haha hey hi hello bye welcome fine cool great nice awesome amazing totally "
    "honestly basically literally seriously definitely probably actually really "
    "today tonight tomorrow yesterday now later soon earlier currently recently "
    "january february march april may june july august september october november "
    "december monday tuesday wednesday thursday friday saturday sunday weekend "
    "something anything everything nothing someone anyone everyone stuff bit bunch "
    "idea question questions problem issue thing things way time times".split()
)
LIGHT_VERBS = frozenset(
    "know knew want try tried help use used look looks looked check checked find found "
    "show showed work works worked get gets make makes take took give gave keep kept "
    "let put seem seems feel felt mean means start started stop come comes came go goes "
    "went done doing happen happened happens add added sound sounds cook fix fixed run "
    "runs call called ask asked wonder sent send talk talked chat chatted speak spoke".split()
)
# Prepositions, conjunctions and pronouns the search's stop words leave out.
FUNCTION_WORDS = frozenset(
    "across along among around behind beside besides beyond despite inside near onto "
    "outside past since toward towards upon via within without though although unless "
    "whether either neither else yet per etc anybody somebody whose whatever whoever "
    "yourself itself mine".split()
)
# Identifiers keep their spelling: a digit, an inner capital, or an inner "_" / "-".
IDENTIFIER = re.compile(r".[A-Z]|\d|.[_-].")
_TOKEN = re.compile(r"[A-Za-z\u00C0-\u024F][\w'\u2019-]*[\w]|[A-Za-z\u00C0-\u024F]|\d[\d.,:/-]*")
# The same in every script written with spaces (Cyrillic, Greek, Devanagari ...), for
# text that is not ASCII: a word goes on through the marks that spell it (Devanagari's
# vowel signs and virama are no ``\w``: "नमस्ते" was cut into pieces) and the joiners.
_MARKS = (
    "".join(
        chr(c)
        # the blocks of the scripts written with spaces, and the combining marks' own
        # (the whole plane took 20 ms at import)
        for block in (range(0x300, 0x1E00), range(0x20D0, 0x2100), range(0xA670, 0xAC00))
        for c in block
        if unicodedata.category(chr(c)) in ("Mn", "Mc")
    )
    + "\u200c\u200d"
)
_WORD_CHAR = rf"[\w{re.escape(_MARKS)}]"
_WIDE_TOKEN = re.compile(rf"[^\W\d_]{_WORD_CHAR}*(?:['\u2019-]{_WORD_CHAR}+)*|\d[\d.,:/-]*")
# The commonest function words of the other languages an owner may write in, which the
# English lists above do not hold: a Russian conversation was topped by "это" and "что".
OTHER_STOP = frozenset(
    # Russian, Ukrainian
    "это что как для все всё так его она они оно мне меня тебя тебе вас вам нас нам был "
    "была было были быть есть нет если или когда где там тут уже еще ещё только очень "
    "может можно нужно надо тоже даже чтобы потому почему который которая которые этот "
    "эта эти этого того тот та при без про под над после перед через между себя свой "
    "наш ваш привет спасибо пожалуйста да хорошо ладно ну вот чем кто какой какая будет "
    "буду будем хочу хочешь мой моя мои твой какие какое лучше "
    "що як для все так його вона вони мені "
    "тебе вже ще дуже може треба також тому який яка які цей ця ці після через привіт "
    "дякую добре "
    # Greek
    "και που για από στο στη στην στον στα στις στους του της των τον την τους τις ένα "
    "μια είναι ήταν θα να με σε δεν μην αλλά όμως αυτό αυτή αυτός αυτά αυτές εγώ εσύ "
    "εμείς εσείς μου σου μας σας τους πολύ πως ότι όταν πού τι ποιος ποια ναι όχι γεια "
    "ευχαριστώ παρακαλώ καλά εδώ εκεί μετά πριν έχω έχει έχουμε είμαι είσαι θέλω θέλεις "
    # Hindi
    "और का की के को में से पर है हैं था थी थे हो होगा होगी कि यह वह ये वो इस उस इसे उसे "
    "मैं मुझे मेरा मेरी मेरे तुम तुम्हें आप आपका आपकी हम हमें हमारा भी तो ही नहीं क्या "
    "कैसे कब कहाँ क्यों जो जब तक लिए साथ बाद पहले बहुत कुछ सब एक अब फिर यहाँ वहाँ "
    "नमस्ते धन्यवाद ठीक हाँ जी करना करें करो किया कर रहा रही रहे गया गई गए सकता सकते "
    "चाहिए "
    # German, French, Spanish, Italian, Portuguese, Dutch (Scandinavian, Polish, Turkish,
    # Arabic and Hebrew below): a German conversation was
    # titled "Linsen Ich Suche Die", a French one "Des Lentilles Soupe Aux". Left out:
    # those that are English words a title may need (war, hat, den, bin, son, car, pour,
    # comment, era, hay, sin, dove, fare, os, nas, sim, van, ale, heel, hoe, ben, min).
    "ich du er sie es wir ihr mein meine meinen meinem meiner dein deine seine ihre "
    "unser unsere der die das dem des ein eine einen einem einer eines und oder aber "
    "nicht kein keine keinen mit für von vom zu zum zur auf aus bei bis nach über unter vor "
    "durch ohne ist sind bist seid waren habe hast haben hatte hatten wird werden wurde "
    "würde kann kannst können konnte muss müssen soll sollte möchte auch noch schon nur "
    "sehr wie wer wo wann warum weil dass wenn ob hier dort jetzt dann heute ja nein "
    "danke bitte hallo mal doch immer alle alles viel viele mehr sich mich dich uns euch "
    "ihm ihn ihnen diese dieser dieses diesen etwas ganz gibt geht gern gerne "
    "je tu il elle nous vous ils elles le la les un une du de au aux et ou mais donc ne "
    "pas que qui quoi dans sur sous avec par chez est sont suis était être avoir ai "
    "avons avez ont ce cette ces cet mon mes ton ta tes sa ses notre nos votre vos leur "
    "leurs oui non merci bonjour salut très bien aussi encore toujours déjà "
    "pourquoi quand où combien faut peut veux voudrais j'ai c'est n'est qu'il "
    "yo tú él ella nosotros ellos ellas usted el los las una unos unas pero qué del al "
    "en con por para sobre entre está están estoy estaba fue ser estar tengo tiene "
    "tienes tenemos mi mis tus su sus nuestro nuestra muy más también ya aquí cuando "
    "donde dónde cómo como porque gracias hola sí bueno quiero quieres necesito puedo "
    "puede lo les te se este esta estos estas ese esa eso esto "
    "io lui lei noi voi loro gli ed che di della dei delle da dal nel nella su "
    "per tra fra è sono sei siamo ho hai ha abbiamo hanno mio mia miei mie tuo tua suo "
    "sua nostro nostra molto anche già ancora sempre qui come perché grazie ciao "
    "questo questa quello quella vorrei voglio posso devo "
    "eu você ele ela nós eles um uma uns umas mas do da dos das em na sem é são foi "
    "está estou tem tenho temos meu minha meus minhas seu nosso nossa muito também já "
    "aqui onde obrigado obrigada olá não isso isto esse essa preciso quero pode "
    "ik jij je hij zij ze wij jullie het een maar dat dit deze voor met op aan naar "
    "bij uit om te tot zijn bent heb hebt heeft hebben wil wilt willen moet moeten zal "
    "niet geen ook nog wel erg veel mijn jouw onze hier daar nu wanneer waar wat wie "
    "waarom nee bedankt goed "
    # Swedish, Norwegian, Danish (not men, till, av, min, han, den, var)
    "jag du hon vi ni de det som och att för med har hade inte kan ska vill på om när "
    "här där också mycket tack hej ett en mitt mina din jeg deg hun vil ikke og "
    "til fra meg mye takk hei jeg ikke noget meget "
    # Polish (not ten, ma, co)
    "się nie jest są był była było jak czy tak ja ty ona oni mnie mój moja moje "
    "jestem jesteś chcę mam bardzo dziękuję proszę cześć tylko już jeszcze też tam "
    "kiedy gdzie dlaczego który która które tego przy dla że od za po ze we "
    # Turkish (not ben, var, biz)
    "bir ve bu için ile çok ne daha ama gibi şu sen siz onlar benim senin bizim "
    "değil evet hayır teşekkürler lütfen merhaba nasıl neden nerede kadar sonra önce "
    "olarak olan yok "
    # Arabic, Hebrew
    "في من على إلى الى عن مع هذا هذه ذلك تلك التي الذي أن إن كان كانت لا ما هو هي هم "
    "أنا انا نحن أنت انت أريد اريد يجب هل قد ثم أو او يا كل بعد قبل عند لم لن مثل بين "
    "حتى شكرا جزيلا مرحبا نعم "
    "אני את אתה אתם הוא היא הם אנחנו של על עם זה זו זאת גם לא כן מה מי איך למה איפה "
    "יש אין רוצה רוצים צריך צריכה כמה תודה רבה שלום אבל או כי אם עוד כבר רק מאוד הזה "
    "הזאת ליד".split()
)

# The pieces of a pasted link: a chat of GitHub links was titled "Https Com Github Foo".
URL_PARTS = frozenset("http https www com org html htm php aspx".split())

# Never a keyword of a title or a topic.
SKIP_KEYWORD = (
    STOP_WORDS | EXTRA_STOP | TITLE_STOP | FILLER_WORDS | FUNCTION_WORDS | OTHER_STOP | URL_PARTS
)


class _Word:
    """What the turns say about one keyword (all spellings of one stem)."""

    __slots__ = ("count", "first", "forms", "lower", "named", "noun", "verb")

    def __init__(self, first: int) -> None:
        self.count = 0
        self.first = first
        self.forms: Counter[str] = Counter()
        self.named = 0  # capitalised inside a sentence
        self.lower = 0  # written in lower case
        self.noun = 0.0
        self.verb = 0.0

    def display(self, key: str) -> str:
        """The spelling shown in a title: a name or identifier as written."""
        form = max(self.forms, key=lambda f: (self.forms[f], -len(f), f))
        if self.is_name() or IDENTIFIER.search(form):
            return form
        return key if key in self.forms else form.lower()

    def is_name(self) -> bool:
        return self.named > 0 and self.named >= self.lower

    def is_verb(self, key: str) -> bool:
        if self.is_name():
            return False
        if self.verb > self.noun or (key in LIGHT_VERBS and self.noun == 0):
            return True
        shaped = (
            (len(key) >= 5 and key.endswith("ed") and not key.endswith("eed"))
            or (len(key) >= 6 and key.endswith("ing"))
            or (len(key) >= 5 and key.endswith("ly"))
        )
        return shaped and self.noun == 0

    def score(self, form: str) -> float:
        weight = float(self.count)
        if self.is_name():
            weight *= 1.5
        elif IDENTIFIER.search(form):
            weight *= 1.3
        elif self.noun > 0:
            weight *= 1.2
        return weight


def _analyse(turns: Sequence[Turn]) -> tuple[dict[str, _Word], Counter[tuple[str, str]]]:
    """Per-stem evidence and the counts of stems written next to each other."""
    words: dict[str, _Word] = {}
    pairs: Counter[tuple[str, str]] = Counter()
    senders = sorted({s.lower() for _, _, s in turns if s})
    for role, content, _ in turns:
        for sentence in sentences(content):
            # Not through a run of Chinese or Japanese: \w would carry a word on
            # ("iPhone用の新しいケースを買いました" was one word, and a title); their
            # terms are bot.cjk_terms'. Other scripts' words are read (they were not:
            # a Russian, Greek or Hindi conversation had no keyword, and no topic).
            latin = latin_of(sentence)
            spans = list((_TOKEN if latin.isascii() else _WIDE_TOKEN).finditer(latin))
            tokens = [m.group(0) for m in spans]
            lows = [t.lower().replace("\u2019", "'") for t in tokens]
            opening = True  # a capital here is the sentence's, or follows a greeting
            previous: str | None = None
            for i, (token, low) in enumerate(zip(tokens, lows, strict=True)):
                if low.endswith("'s"):  # the possessive: "the X-T5's dials"
                    token, low = token[:-2], low[:-2]
                low = low.strip("'-")
                if not low or low[0].isdigit():
                    previous = None
                    opening = False
                    continue
                key = stem(low)
                skip = (
                    len(low) <= 2
                    or low in SKIP_KEYWORD
                    or key in SKIP_KEYWORD
                    or (re.split("'", low)[0] in STOP_WORDS and "'" in low)
                    or any(s.startswith(low) for s in senders)
                )
                if skip:
                    # After a greeting or filler ("Ok, Perfect"), a capital still opens.
                    opening = opening and (low in FILLER_WORDS or low in EXTRA_STOP)
                    previous = None
                    continue
                info = words.get(key)
                if info is None:
                    info = words[key] = _Word(len(words))
                info.count += 2 if role == "user" else 1
                info.forms[token.strip("'-\u2019")] += 1
                if token[0].isupper() and not opening:
                    info.named += 1
                elif token[0].islower():
                    info.lower += 1
                back = i - 1
                while back >= 0 and lows[back] in _LOOKBACK_SKIP:
                    back -= 1
                before = lows[back] if back >= 0 else ""
                if before in _SUBJECTS or before in _MODALS:
                    info.verb += 1
                elif before == "to":
                    info.verb += 0.5  # "to cook" or "to Lisbon": half a vote
                elif before in _DETERMINERS or (i > 0 and lows[i - 1][:1].isdigit()):
                    info.noun += 1
                if i + 1 < len(lows) and lows[i + 1] in _PARTICLES:
                    info.verb += 1
                joined = i > 0 and not sentence[spans[i - 1].end() : spans[i].start()].strip()
                if previous is not None and previous != key and joined:
                    pairs[(previous, key)] += 1
                previous = key
                opening = False
    return words, pairs


def ranked_words(
    turns: Sequence[Turn],
) -> tuple[list[tuple[str, str, float]], Counter[tuple[str, str]]]:
    """(stem, spelling, score) of the subject words, best first; ties by first use."""
    words, pairs = _analyse(turns)
    found = []
    for key, info in words.items():
        if info.is_verb(key):
            continue
        form = info.display(key)
        found.append((-info.score(form), info.first, key, form))
    found.sort()
    return [(key, form, -neg) for neg, _, key, form in found], pairs


def keywords(turns: Sequence[Turn], limit: int = 6) -> list[str]:
    """Most characteristic subject words (user turns weigh double), lower case."""
    ranked, _ = ranked_words(turns)
    return [form.lower() for _, form, _ in ranked[:limit]]
