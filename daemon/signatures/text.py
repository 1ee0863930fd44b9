"""Text normalisation and tokenisation (pure functions).

Pipeline of :func:`normalise_text`: lone surrogates, NUL and other control characters → space; HTML
``<script>``/``<style>`` blocks and tags removed, entities unescaped; Unicode NFKC; case folding;
optionally accents folded (NFKD, combining marks dropped); whitespace collapsed. Punctuation is kept
so that the result stays readable (it is what :attr:`Signature.text <daemon.signatures.Signature.text>` shows).

:func:`tokens` then splits the normalised text into word tokens. A token is a run of letters/digits,
optionally joined by internal ``-``, ``.`` or ``/`` (``kdl-40v4100``, ``33-1/3``, ``1.5``); Chinese
and Japanese, written without spaces, give the character bigrams of each run of their characters
(:func:`cjk_bigrams`):

* a joined token mixing letters and digits (a model number) is kept as is **and** in its joined form
  (``kdl-40v4100`` → ``kdl-40v4100``, ``kdl40v4100``);
* a joined token of digits only (``33-1/3``, ``4.99``) is kept whole;
* a joined token of letters only (``wide-range``, ``www.example.com``) is split into its parts.

Then, per :class:`TextOptions`: synonyms/abbreviations are replaced (from configuration), stop words
are dropped, and words without digits are stemmed with Snowball. The outcome per distinct word
candidate is memoised (Snowball costs ~37 µs a word; a dictionary hit ~0.05 µs).
"""

from __future__ import annotations

import html
import re
import threading
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import chain
from typing import Callable

import snowballstemmer

from ._memo import fill_memo
from .stopwords import STOPWORDS

LANGUAGES: tuple[str, ...] = tuple(sorted(STOPWORDS))
"""Languages accepted by :class:`TextOptions` (each has a stop-word list and a Snowball stemmer)."""

_BAD_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
_BLOCK_OPEN = re.compile(r"<!--|<(script|style)\b[^<>]{0,2000}>", re.IGNORECASE)
_BLOCK_CLOSE = {
    None: re.compile(r"-->"),
    "script": re.compile(r"</script\s*>", re.IGNORECASE),
    "style": re.compile(r"</style\s*>", re.IGNORECASE),
}
_TAG = re.compile(r"<[!/]?[a-zA-Z][^<>]{0,2000}>")
_CJK_CHARS = "\u3040-\u30fa\u30fc-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
"""Hiragana, katakana (with the prolonged sound mark, without the middle dot ``・``, a separator), CJK
ideographs (the unified block, extension A, the compatibility block) and half-width katakana: the
scripts that Chinese and Japanese write without spaces between words."""
CJK_RUN = re.compile(f"[{_CJK_CHARS}]+")
"""A run of :data:`_CJK_CHARS` characters."""
_TOKEN = re.compile(f"[{_CJK_CHARS}]+|[^\\W_{_CJK_CHARS}]+(?:[-./][^\\W_{_CJK_CHARS}]+)*")
_TOKEN_ASCII = re.compile(r"[a-z0-9]+(?:[-./][a-z0-9]+)*")  # same on case-folded ASCII text, ~40% faster
_JOINERS = re.compile(r"[-./]")
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|\s*[\n\r]+\s*|\s*/\s+|\s+/\s*|\s+[|•·]\s+")


@dataclass(frozen=True)
class TextOptions:
    """How one text field is tokenised.

    Attributes:
        language: ``"english"``, ``"french"``, ``"german"``, ``"spanish"`` or ``"italian"`` (:data:`LANGUAGES`):
            picks the stop-word list and the Snowball stemmer.
        stem: apply the Snowball stemmer to tokens without digits.
        stopwords: drop the language's stop words (after synonym replacement).
        fold_accents: fold accents (``é`` → ``e``) for matching.
        synonyms: ``(from, to)`` pairs, e.g. ``("st", "saint")``; ``from`` is one normalised token
            (``"st."`` normalises to ``"st"``), ``to`` may be several words. From configuration, not code.
    """

    language: str = "english"
    stem: bool = True
    stopwords: bool = True
    fold_accents: bool = True
    synonyms: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.language not in STOPWORDS:
            raise ValueError(f"unknown language {self.language!r}; expected one of {', '.join(LANGUAGES)}")


def _strip_blocks(text: str) -> str:
    """Remove comments and ``<script>``/``<style>`` elements in one forward pass (linear time even for
    thousands of unclosed openers; an unclosed block runs to the end of the text, as in browsers)."""
    parts: list[str] = []
    pos = 0
    while (m := _BLOCK_OPEN.search(text, pos)) is not None:
        parts.append(text[pos : m.start()])
        kind = m.group(1).lower() if m.group(1) else None
        close = _BLOCK_CLOSE[kind].search(text, m.end())
        if close is None:
            return " ".join(parts)
        pos = close.end()
        parts.append(" ")
    parts.append(text[pos:])
    return "".join(parts)


_KANA_VOICING = frozenset("\u3099\u309a")
"""The combining voiced and semi-voiced sound marks of kana (dakuten, handakuten): they make another
letter (``フ`` + ``゙`` is ``ブ``), not an accent, so :func:`_fold_accents` keeps them."""


def _fold_accents(text: str) -> str:
    """``text`` without its accents: decomposed (NFKD), combining marks dropped (the kana voicing
    marks, :data:`_KANA_VOICING`, kept), recomposed (NFC): ``é`` -> ``e``, ``ブ`` stays ``ブ``."""
    decomposed = unicodedata.normalize("NFKD", text)
    return unicodedata.normalize("NFC", "".join(c for c in decomposed
                                                if not unicodedata.combining(c) or c in _KANA_VOICING))


def normalise_text(text: str, fold_accents: bool = True) -> str:
    """Normalise a text for matching and display (see the module docstring for the steps).

    Args:
        text: any ``str`` (invalid surrogates, NUL bytes, markup and emoji are accepted).
        fold_accents: strip diacritics after case folding.
    Returns:
        The normalised ``str`` (may be empty); never raises for ``str`` input.
    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"normalise_text expects str, got {type(text).__name__}")
    if not text:
        return ""
    if not text.isprintable():  # control characters, line breaks, lone surrogates
        text = _BAD_CHARS.sub(" ", text)
    if "<" in text:
        text = _TAG.sub(" ", _strip_blocks(text))
    if "&" in text:
        text = html.unescape(text)
        text = _BAD_CHARS.sub(" ", text)  # entities such as &#0; may decode to control characters
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    text = text.casefold()
    if fold_accents and not text.isascii():
        text = _fold_accents(text)
    return " ".join(text.split())


_local = threading.local()


def _stemmer(language: str) -> Callable[[str], str]:
    """Snowball ``stemWord`` for ``language``; one stemmer per thread (stemmer objects keep state)."""
    stemmers = getattr(_local, "stemmers", None)
    if stemmers is None:
        stemmers = _local.stemmers = {}
    if language not in stemmers:
        stemmers[language] = snowballstemmer.stemmer(language).stemWord
    return stemmers[language]


@lru_cache(maxsize=64)
def _stopwords(language: str, fold: bool) -> frozenset[str]:
    return frozenset(normalise_text(w, fold) for w in STOPWORDS[language])


@lru_cache(maxsize=256)
def _synonym_map(synonyms: tuple[tuple[str, str], ...], fold: bool) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for src, dst in synonyms:
        key = _raw_tokens(normalise_text(src, fold))
        if len(key) == 1:
            out[key[0]] = tuple(_raw_tokens(normalise_text(dst, fold)))
    return out


def words(normalised: str) -> list[str]:
    """Word candidates of a normalised text: runs of letters/digits, possibly joined by ``-./``; a run
    of Chinese or Japanese characters (:data:`CJK_RUN`) is a candidate of its own, apart from the
    letters and digits around it (``"出售二手iphone12"`` -> ``"出售二手"``, ``"iphone12"``), and
    :func:`tokens` makes its bigrams (:func:`cjk_bigrams`).

    Returns:
        ``list[str]`` in text order (``"kdl-40v4100"``, ``"33-1/3"``, ``"wide-range"`` stay whole); the
        input of :func:`tokens_from_words` and :func:`daemon.signatures.extract.model_numbers_from_words`.
    """
    return (_TOKEN_ASCII if normalised.isascii() else _TOKEN).findall(normalised)


def _raw_tokens(normalised: str) -> list[str]:
    return _expand(words(normalised))


MAX_TOKEN_CHARS = 64
"""Longer word candidates (base64 blobs, URLs glued together) are dropped rather than tokenised."""


def cjk_bigrams(run: str) -> list[str]:
    """The overlapping character bigrams of a run of Chinese or Japanese characters (:data:`CJK_RUN`):
    ``"二手手机"`` -> ``["二手", "手手", "手机"]``; a run of one character is itself. Those scripts put no
    space between words, so a run is a phrase, not a word; bigrams are the tokens search engines
    index such text by without a dictionary (Lucene's ``CJKBigramFilter``, Elasticsearch's ``cjk``
    analyzer), and two texts sharing most words share most bigrams."""
    return [run] if len(run) < 2 else [run[i:i + 2] for i in range(len(run) - 1)]


def _expand(candidates: list[str]) -> list[str]:
    out: list[str] = []
    for tok in candidates:
        if len(tok) > MAX_TOKEN_CHARS and not CJK_RUN.match(tok):
            continue
        if tok.isalnum():
            if not tok.isascii() and CJK_RUN.match(tok):  # a Chinese or Japanese phrase: its bigrams
                out.extend(cjk_bigrams(tok))
            else:
                out.append(tok)
            continue
        joined = _JOINERS.sub("", tok)
        if joined.isalpha():
            out.extend(_JOINERS.split(tok))
        elif joined.isdigit():
            out.append(tok)
        else:  # mixes letters and digits: a model number, kept both ways
            out.append(tok)
            out.append(joined)
    return out


DEFAULT_TEXT_OPTIONS = TextOptions()


def tokens(text: str, options: TextOptions = DEFAULT_TEXT_OPTIONS, *, normalised: bool = False) -> list[str]:
    """Split a text into normalised word tokens, in text order, duplicates kept.

    Args:
        text: raw text (normalised first with :func:`normalise_text`) or, with ``normalised=True``,
            the output of :func:`normalise_text`.
        options: per-field :class:`TextOptions` (language, stemming, stop words, synonyms).
    Returns:
        ``list[str]``; empty for empty, punctuation-only or emoji-only text.
    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    if not normalised:
        text = normalise_text(text, options.fold_accents)
    return tokens_from_words(text.split(), options)


def tokens_from_words(candidates: list[str], options: TextOptions = DEFAULT_TEXT_OPTIONS) -> list[str]:
    """:func:`tokens` from word candidates (the output of :func:`words`) or from the whitespace-separated
    pieces of a normalised text (``normalised.split()``: ``"(kdl-40v4100),"`` is one piece).

    A piece is split into word candidates with :func:`words` (a word candidate is its own only
    candidate, and no candidate spans whitespace, so both inputs give the same tokens). The outcome of
    each distinct piece (word candidates, model-number expansion, synonyms, stop words, stemming: zero
    or more tokens) is memoised per :class:`TextOptions`, so once a vocabulary has been seen a text
    costs one ``str.split`` and one dictionary lookup per piece, with no regex pass (ad vocabularies
    repeat a lot).

    Returns:
        ``list[str]`` of tokens after model-number expansion, synonyms, stop words and stemming.
    """
    cache = _candidate_cache(options)
    try:  # the common case: every piece seen before (one pass, no look for missing pieces first)
        return list(chain.from_iterable(map(cache.__getitem__, candidates)))
    except KeyError:
        pass
    fill_memo(cache, candidates, lambda c: _candidate_tokens(c, options), WORD_CACHE_SIZE)
    return list(chain.from_iterable(map(cache.__getitem__, candidates)))


_GROUPED_NUMBER = re.compile(r"(?<![\d.,])\d{1,3}([.,])\d{3}(?:\1\d{3})*(?!\d|[.,]\d)")
"""A number written with a thousands separator, one kind throughout (``85,000``, ``85.000``,
``1,234,567``), not part of a longer run of digits and separators (``2.000,50``, ``1.2.3``)."""


def _ungrouped(piece: str) -> str:
    """``piece`` with the thousands separators of its numbers taken out (:data:`_GROUPED_NUMBER`):
    ``£1,850`` -> ``£1850``, ``85.000`` -> ``85000``. English writes ``85,000`` where German, French
    or Spanish sites write ``85.000`` and others ``85000``, so a repost or another site's copy of an
    ad differs in these tokens only by a locale's habit. A decimal number (``1.4``, ``3,5``) is left
    as it is; a number of one group with a dot (``1.500``) reads as thousands, which in listings it
    mostly is (a price, a mileage)."""
    if ("," in piece or "." in piece) and _GROUPED_NUMBER.search(piece):
        return _GROUPED_NUMBER.sub(lambda m: m.group().replace(m.group(1), ""), piece)
    return piece


def _candidate_tokens(candidate: str, options: TextOptions) -> tuple[str, ...]:
    """The tokens one piece or word candidate becomes (see the module docstring), in order; a number
    with thousands separators as one token without them (:func:`_ungrouped`)."""
    toks = _expand(words(_ungrouped(candidate)))
    if options.synonyms:
        syn = _synonym_map(options.synonyms, options.fold_accents)
        toks = [r for t in toks for r in syn.get(t, (t,))]
    if not (options.stopwords or options.stem):
        return tuple(toks)
    forms = _final_form_cache(options)
    out: list[str] = []
    for t in toks:
        w = forms.get(t)
        if w is None:
            if len(forms) >= WORD_CACHE_SIZE:
                forms.clear()
            w = forms[t] = _final_form(t, options)
        if w:
            out.append(w)
    return tuple(out)


WORD_CACHE_SIZE = 200_000
"""Distinct word candidates whose tokens are memoised per option set (emptied past this size)."""


@lru_cache(maxsize=64)
def _candidate_cache(options: TextOptions) -> dict[str, tuple[str, ...]]:
    return {}


@lru_cache(maxsize=64)
def _final_form_cache(options: TextOptions) -> dict[str, str]:
    """Token -> :func:`_final_form` memo per option set, under the per-piece memo: distinct pieces
    outnumber distinct tokens (``"tv,"``, ``"(tv)"`` and ``"tv"`` are three pieces, one token), and
    Snowball costs ~37 µs a word, so each token is stemmed once per process (on 20,000 generated
    Abt-Buy ads: 11,277 stems instead of 19,126). Emptied past :data:`WORD_CACHE_SIZE` entries."""
    return {}


def _final_form(token: str, options: TextOptions) -> str:
    """The stemmed token, or ``""`` for a stop word (Snowball stems only tokens without digits)."""
    if options.stopwords and token in _stopwords(options.language, options.fold_accents):
        return ""
    if options.stem and token.isalpha():
        return _stemmer(options.language)(token)
    return token


def sentences(normalised: str) -> list[str]:
    """Split a normalised text into sentences (on ``. ! ? ; :`` + space, line breaks, `` / `` and bullets).

    Returns:
        Non-empty, stripped sentence strings in text order.
    """
    return [s for s in (p.strip() for p in _SENTENCE_END.split(normalised)) if s]
