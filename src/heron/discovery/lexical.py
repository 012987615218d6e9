"""The lexical ranker: BM25 over words and character n-grams of each tool's text.

Word-level BM25 (name tokens weighted double, words reduced by a light suffix stemmer) plus a
character n-gram BM25 for compound and misspelt names (`airqualityforecast`, `get-env`).
Request words that say nothing about the capability (`find`, `help`, `please`, `tool`) are
dropped from the query. A hand-written lexicon of related words per common tool domain
expands the query at a lower weight (re-measured with the three dense views, it still adds
2.5 points of fused recall@5 on the tune split, docs/discovery.md).

`relevance` (the word-level score, direct plus expanded terms) is what the lexical-only
"nothing close" threshold compares, `direct` (the query's own words) what the hybrid one
compares; n-gram similarity alone never makes a hit.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["LexicalParams", "LexicalRanker", "LexicalScores", "tokenize"]

FloatArray = npt.NDArray[np.float64]


@functools.cache
def _bm25s() -> Any:
    # bm25s takes a fifth of a second to import: only when a catalogue is indexed.
    import bm25s  # type: ignore[import-untyped]

    return bm25s


@functools.cache
def _stopwords() -> frozenset[str]:
    return frozenset(_bm25s().stopwords.STOPWORDS_EN)


# Words of a request that say nothing about which capability is wanted.
def _word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


_REQUEST_WORDS = _word_set(
    """find get help give provide show tell want need like would could please know use using
    tool tools information info recommend suggest search look looking app something way best
    good new make create assist any some also me my i you can what which where how when who
    there this that it"""
)

# Related words per common tool domain (one group per line). A query word in a group adds the
# group's other words at a lower weight. General vocabulary, not names of particular tools.
_RELATED = """
weather forecast temperature rain precipitation snow wind humidity climate storm sunny
finance financial stock stocks share shares market invest investment investing investor \
portfolio trading trade crypto cryptocurrency bitcoin ethereum nft fund dividend earnings \
volatility ticker nasdaq economy
currency exchange convert conversion dollar euro yen forex
news headline headlines article articles breaking politics political journalism press
music song songs album artist band playlist lyrics chart charts billboard spotify concert singer
movie movies film films cinema actor actress cast director tv series trailer netflix
video videos youtube clip
podcast podcasts episode interview interviews audio listen
book books novel author reading literature ebook story stories
recipe recipes cook cooking meal meals food dish dishes ingredient ingredients bake baking \
kitchen dinner lunch breakfast pizza pasta cuisine
diet nutrition calorie calories healthy protein vitamin weight fitness workout exercise gym
health medical medicine doctor symptom symptoms disease clinic hospital drug drugs treatment \
therapy mental
travel trip trips vacation holiday tour tourist itinerary destination flight flights airline \
hotel hotels accommodation booking resort sightseeing
restaurant restaurants dining eat cafe reservation review reviews
house home apartment rent renting lease property properties estate mortgage housing realtor
job jobs career careers hiring hire resume cv salary employment recruit recruiter vacancy openings
course courses class classes lesson lessons learn learning teach teacher tutor student students \
school university education training curriculum
research paper papers academic scholar scientific study studies journal citation publication arxiv
law legal lawyer attorney court contract regulation statute lawsuit divorce
shop shopping buy purchase product products deal deals discount coupon store order cheapest \
affordable sale
code coding programming developer software github repository repo api bug debug script python \
javascript
sql database query table analytics
seo keyword keywords ranking visibility traffic marketing
website web site page domain url hosting blog wordpress
image images picture pictures photo photos art drawing draw design illustration graphic logo
translate translation language languages english spanish french chinese japanese
email mail inbox message messages letter outreach
calendar schedule meeting meetings event events appointment reminder
map maps location locations address directions route navigation nearby place places
car cars vehicle vehicles ev electric charging dealer automobile
sport sports team teams score scores match league nba nfl mlb nhl soccer football basketball \
baseball
game games gaming puzzle trivia quiz
pdf document documents file files summarize summary
qr barcode
astrology horoscope zodiac fortune tarot
math calculate calculator calculation equation formula compute arithmetic
gift gifts present birthday anniversary
pet pets dog dogs cat cats animal animals
plant plants garden gardening flower flowers
company companies business businesses startup startups corporate enterprise firm
social media twitter instagram facebook tiktok followers
habit habits routine productivity goal goals meditation mindfulness
"""

_SUFFIXES = (
    ("ies", "y"),
    ("sses", "ss"),
    ("ied", "y"),
    ("ing", ""),
    ("edly", ""),
    ("ed", ""),
    ("ly", ""),
    ("es", ""),
    ("s", ""),
)


def _stem(word: str) -> str:
    """A light suffix stemmer: plural and verb endings only, stems of at least 3 letters."""
    for suffix, replacement in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + replacement
    return word


def _split_identifiers(text: str) -> str:
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    return re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", text)


# Han, kana and hangul are written without spaces: index their character bigrams instead.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")


def _words(text: str) -> list[str]:
    words = [
        w
        for w in re.findall(r"[a-z0-9]+", _split_identifiers(text).lower())
        if len(w) >= 2 and w not in _stopwords()
    ]
    for run in _CJK.findall(text):
        words.extend(run[i : i + 2] for i in range(max(1, len(run) - 1)))
    return words


def tokenize(text: str) -> list[str]:
    """Index tokens: identifiers split (`getWeather` → get, weather), lower-cased, stop words
    dropped, lightly stemmed."""
    return [_stem(w) for w in _words(text)]


def _ngrams(words: Sequence[str], low: int = 3, high: int = 5) -> list[str]:
    grams: list[str] = []
    for word in words:
        padded = f"#{word}#"
        for n in range(low, high + 1):
            grams.extend(padded[i : i + n] for i in range(len(padded) - n + 1))
    return grams


def _related_index() -> dict[str, tuple[str, ...]]:
    related: dict[str, set[str]] = {}
    for line in _RELATED.replace("\\\n", " ").strip().splitlines():
        group = [_stem(w) for w in line.split()]
        for word in group:
            related.setdefault(word, set()).update(w for w in group if w != word)
    return {w: tuple(sorted(ws)) for w, ws in related.items()}


_RELATED_INDEX = _related_index()
_REQUEST_STEMS = frozenset(_stem(w) for w in _REQUEST_WORDS)


@dataclass(frozen=True, kw_only=True, slots=True)
class LexicalParams:
    """Ranking knobs (defaults tuned on the MetaTool tune split)."""

    k1: float = 2.0
    b: float = 0.3
    name_weight: int = 2
    """How many times the name's tokens count (names carry the most signal)."""
    ngram_weight: float = 0.43
    expansion_weight: float = 1.0
    """Weight of the related-words lexicon (0 turns it off)."""
    drop_request_words: bool = True
    """Drop words that only make a request (`find`, `help`, `please`) from the query."""
    min_catalogue: int = 200
    """Word scores of smaller catalogues are computed as if the catalogue were padded to this
    size (about that of the MetaTool catalogue the thresholds were tuned on) with documents
    that match nothing.

    BM25's IDF depends on the catalogue's size: a word found in one tool out of N weighs
    log(1 + (N - 0.5) / 1.5), 0.29 for N = 1 and 0.98 for N = 3 against 4.9 for N = 200.
    Without the padding even an exact word of a tool's name would score under the relevance
    thresholds in a catalogue of one to three tools, and the answer would be "nothing close"."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LexicalScores:
    score: FloatArray
    """Combined rank score per document (relative; comparable within one query)."""
    relevance: FloatArray
    """Word-level BM25 per document (direct + weighted expansion): the lexical-only mode's
    "nothing close" quantity."""
    direct: FloatArray
    """Word-level BM25 of the query's own words only: the hybrid mode's quantity (the
    lexicon's guesses help ranking but do not vouch that a tool is close)."""


class _Bm25:
    """A bm25s index over pre-tokenised documents, queried with token lists."""

    def __init__(self, docs: Sequence[list[str]], *, k1: float, b: float, pad_to: int = 0) -> None:
        self._n = len(docs)
        self._model = _bm25s().BM25(k1=k1, b=b)
        # bm25s needs at least one token per document to build its vocabulary.
        indexed = [d or ["\x00"] for d in docs]
        if 0 < len(indexed) < pad_to:
            # Padding of the average length (length normalisation is unchanged), holding only a
            # token no query can contain.
            length = max(1, round(sum(map(len, indexed)) / len(indexed)))
            indexed += [["\x01"] * length] * (pad_to - len(indexed))
        self._model.index(indexed, show_progress=False)
        self._vocab: dict[str, int] = self._model.vocab_dict

    def scores(self, tokens: Sequence[str]) -> FloatArray:
        ids = [self._vocab[t] for t in tokens if t in self._vocab]
        if not ids:
            return np.zeros(self._n)
        return np.asarray(self._model.get_scores(ids), dtype=np.float64)[: self._n]


def normalised(scores: FloatArray) -> FloatArray:
    """Scores divided by the best one (all zeros stay zeros)."""
    top = float(scores.max()) if scores.size else 0.0
    return scores / top if top > 0 else scores


class LexicalRanker:
    """BM25 over `(name, body)` text pairs, built once per catalogue."""

    def __init__(
        self, fields: Sequence[tuple[str, str]], params: LexicalParams | None = None
    ) -> None:
        self.params = params or LexicalParams()
        self._n = len(fields)
        p = self.params
        word_docs = []
        gram_docs = []
        for name, body in fields:
            name_words = _words(name)
            word_docs.append([_stem(w) for w in name_words] * p.name_weight + tokenize(body))
            gram_docs.append(_ngrams(name_words) * 2 + _ngrams(_words(body)))
        self._words = _Bm25(word_docs, k1=p.k1, b=p.b, pad_to=p.min_catalogue) if fields else None
        self._grams = _Bm25(gram_docs, k1=1.2, b=0.75) if fields else None

    def __len__(self) -> int:
        return self._n

    def scores(self, query: str) -> LexicalScores:
        """Scores of every document for a natural-language query."""
        if self._words is None or self._grams is None:
            empty = np.zeros(0)
            return LexicalScores(score=empty, relevance=empty, direct=empty)
        p = self.params
        raw = _words(query)
        content = raw
        if p.drop_request_words:
            content = [w for w in raw if _stem(w) not in _REQUEST_STEMS] or raw
        terms = [_stem(w) for w in content]
        direct = self._words.scores(terms)
        zeros = np.zeros(self._n)
        expanded_terms = (
            [r for t in terms for r in _RELATED_INDEX.get(t, ()) if r not in terms]
            if p.expansion_weight
            else []
        )
        expanded = self._words.scores(expanded_terms) if expanded_terms else zeros
        grams = self._grams.scores(_ngrams(content)) if p.ngram_weight else zeros
        score = (
            normalised(direct)
            + p.expansion_weight * normalised(expanded)
            + p.ngram_weight * normalised(grams)
        )
        return LexicalScores(
            score=score, relevance=direct + p.expansion_weight * expanded, direct=direct
        )
