"""``SignatureParams``: every knob of the signature computation, validated from configuration.

Configuration shape (YAML/TOML/JSON, under ``signatures``; every key optional)::

    fields:                     # text fields; title and body always exist, others are appended to body
      title: {language: english, stem: true, stopwords: true, fold_accents: true, synonyms: {st.: saint}}
      body:  {language: english, stem: true, stopwords: true, fold_accents: true, synonyms: {}}
    shingles: {n: 3, max_body_chars: 100000}
    simhash:  {features: unigrams, blocks: 4, max_distance: 3}
    minhash:  {num_perm: 128}
    lsh:      {threshold: 0.6, bands: null, rows: null, keys: true}   # keys: false -> no band keys
    bottomk:  {k: 64, shingles: words}
    geohash:  {precision: 6}
    super:    {rules: [[title, geo], [model, category]], title_tokens: 3, max_per_rule: 32, title_pairs: 0}
    seed: 0
    enabled: true               # false: plain sync, documents without signatures (see signatures_enabled)
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any, Callable, Mapping

from ..errors import ConfigError
from ._hashing import hash64
from .lsh import lsh_params
from .simhash import block_count
from .text import LANGUAGES, TextOptions

SIGNATURE_SCHEMA_VERSION = 3
"""Version of :meth:`Signature.to_document`'s layout; bump when a stored document changes meaning.

3: super tokens of a rule with an empty component degrade instead of vanishing, and every record
carries identity keys (whole title, each model number). The fingerprint changes with it, so
documents signed before need a ``nearsync reindex`` to be compared with new ones."""

DEFAULT_LSH_THRESHOLD = 0.6
"""Default target Jaccard similarity of the LSH bands (``signatures.lsh.threshold``): 18 bands of 7
rows with 128 permutations (:func:`~daemon.signatures.lsh.lsh_params`), so two records whose word
3-shingles have Jaccard similarity 0.8 share a band with probability 0.986, at 0.7 with 0.79 and
at 0.5 with 0.13 (``nearsync lsh --threshold 0.6``).

Why 0.6 and not 0.5 (25 bands of 5 rows, the default until 2026-11-26): bands are not the only
candidate keys. A record also carries simhash blocks (near-identical texts), its whole-title and
model-number keys and sampled title tokens or title pairs (:mod:`~daemon.signatures.supertokens`),
so a listing reposted with small edits or the same product in another shop is found through those
whatever the bands do; the bands add the records whose body text is mostly shared. Below Jaccard
0.7, 30% or more of the two bodies' distinct 3-shingles are in one of them only, which is no
longer the same text with small edits: such pairs are either found through their titles and
models or are not duplicates. Every candidate key costs the index an entry per document (a GIN entry in
PostgreSQL, a unique keyword term on a search server), and bands are the one kind whose count
does not depend on the record, so 7 keys fewer of ~37 is a fifth less index work for every
signed write. Measured on all labelled sets of docs/quality.md (Abt-Buy, DBLP-ACM, generated
reposts of five seeds; 2026-11-26): the same pairs, candidates and F1 at 0.6 as at 0.5. The
candidate keys are tested by the global-scope sets (Abt-Buy, DBLP-ACM); the reposts' sellers have
fewer ads than ``dedup.exhaustive_below``, so their ads are compared with all others of the
seller whatever the keys."""

SUPER_COMPONENTS: tuple[str, ...] = ("title", "body", "geo", "model", "category", "user")
"""Field roles a super-token rule may combine."""
SIMHASH_FEATURES: tuple[str, ...] = ("unigrams", "shingles")
SHINGLE_KINDS: tuple[str, ...] = ("words", "sentences")
MAX_SUPER_RULES = 8
MAX_BLOCK_KEYS = 100


@dataclass(frozen=True)
class SignatureParams:
    """Parameters of :func:`compute_signature` (frozen, hashable; defaults suit classified ads).

    Attributes:
        fields: ``(name, TextOptions)`` per text field; ``title`` and ``body`` always present, any
            other configured field's text is appended to the body.
        shingle_n: word n-gram width for MinHash/bottom-k shingles.
        max_body_chars: the body (with appended fields) is truncated to this many characters before
            any processing; the title to :attr:`max_title_chars`.
        simhash_features: ``"unigrams"`` (TF-weighted tokens; ~2 bits per one-word edit) or
            ``"shingles"`` (distinct word n-grams, weight 1; ~5 bits).
        simhash_blocks, simhash_max_distance: permuted-table layout (:func:`block_keys`).
        num_perm: MinHash length. lsh_threshold: target Jaccard for :func:`lsh_params`
            (:data:`DEFAULT_LSH_THRESHOLD`);
            lsh_bands/lsh_rows: explicit layout overriding the threshold (both or neither).
        lsh_keys: ``True`` (default): the LSH band keys are candidate keys. ``False``
            (``signatures.lsh.keys = false``): no band keys; the MinHash is still computed and
            stored (scoring's ``jaccard`` metric reads it), only the bands cut from it are not
            indexed. Use it when the other keys already find every candidate the bands find, as
            for product listings: their title-pair and model-number keys (``super``) link two
            listings of one product whatever their bodies, and a pair whose bodies share most of
            their 3-shingles but neither title words nor a model number is not two shops' copy of
            one product. Measured with ``bench/bench_blocking.py`` on Abt-Buy and a
            20,000-listing product corpus (2026-11-26): 47 -> 30 keys per listing, recall@50
            unchanged (0.974, 0.844). Keep the default for texts whose titles say little
            (classified ads reposted under a new title), where the bands find a copy whose body
            is mostly the same text.
            With ``False`` the LSH layout (threshold, bands, rows) has no effect on any document
            and is left out of the fingerprint; ``True`` is left out too, so indexes signed
            before this setting existed stay comparable.
        bottomk_k: bottom-k sketch size; bottomk_shingles: ``"words"`` (n-grams) or ``"sentences"``.
        geohash_precision: 1–12. super_rules: tuples of :data:`SUPER_COMPONENTS`.
        super_title_tokens: title tokens sampled per record for super tokens (smallest hashes).
        super_max_per_rule: cap of super tokens per rule. seed: hashing/permutation seed in ``[0, 2**32)``.
        super_title_pairs: 0 (default: none), or 2–16: the pairs of that many sampled title tokens
            are keys of their own (:func:`~daemon.signatures.supertokens.title_pair_keys`; the
            ``products`` profile uses 8 instead of single-word title keys). Left out of the
            fingerprint when 0, so indexes signed before this setting existed stay comparable.
    """

    fields: tuple[tuple[str, TextOptions], ...] = (("title", TextOptions()), ("body", TextOptions()))
    shingle_n: int = 3
    max_body_chars: int = 100_000
    max_title_chars: int = 1_000
    simhash_features: str = "unigrams"
    simhash_blocks: int = 4
    simhash_max_distance: int = 3
    num_perm: int = 128
    lsh_threshold: float = DEFAULT_LSH_THRESHOLD
    lsh_bands: int | None = None
    lsh_rows: int | None = None
    lsh_keys: bool = True
    bottomk_k: int = 64
    bottomk_shingles: str = "words"
    geohash_precision: int = 6
    super_rules: tuple[tuple[str, ...], ...] = (("title", "geo"), ("model", "category"))
    super_title_tokens: int = 3
    super_max_per_rule: int = 32
    super_title_pairs: int = 0
    seed: int = 0
    _options: dict[str, TextOptions] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._options.update(self.fields)
        self._options.setdefault("title", TextOptions())
        self._options.setdefault("body", TextOptions())

    def text_options(self, name: str) -> TextOptions:
        """The :class:`TextOptions` of field ``name`` (defaults when not configured)."""
        return self._options.get(name) or TextOptions()

    @property
    def extra_fields(self) -> tuple[str, ...]:
        """Configured text fields other than ``title`` and ``body``, in configuration order."""
        return tuple(name for name, _ in self.fields if name not in ("title", "body"))

    @cached_property
    def bands_rows(self) -> tuple[int, int]:
        """``(bands, rows)``: explicit ones, else :func:`lsh_params` for ``lsh_threshold`` and ``num_perm``."""
        if self.lsh_bands is not None and self.lsh_rows is not None:
            return self.lsh_bands, self.lsh_rows
        return lsh_params(self.lsh_threshold, self.num_perm)

    @cached_property
    def _fingerprint(self) -> str:
        data = asdict(self)
        data.pop("_options", None)
        if not data["super_title_pairs"]:
            del data["super_title_pairs"]  # the default: the fingerprint of parameters without it
        if not data.pop("lsh_keys"):  # True (the default) is left out as above; False: no band
            # keys, so the LSH layout changes no document and is left out instead
            for k in ("lsh_threshold", "lsh_bands", "lsh_rows"):
                del data[k]
            data["lsh_keys"] = False
        data["v"] = SIGNATURE_SCHEMA_VERSION
        return format(hash64(json.dumps(data, sort_keys=True, separators=(",", ":"))), "016x")[:12]

    def fingerprint(self) -> str:
        """12 hex characters identifying these parameters and the schema version (XXH3-64 of canonical JSON).

        Signatures are only comparable when their fingerprints are equal.
        """
        return self._fingerprint

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any] | None, prefix: str = "signatures") -> "SignatureParams":
        """Validate a configuration mapping (see the module docstring) and build the parameters.

        Args:
            d: the ``signatures`` section (``None`` or ``{}`` → defaults).
            prefix: dotted name of the section, used in error keys.
        Returns:
            :class:`SignatureParams`.
        Raises:
            ConfigError: naming the dotted key, e.g. ``ConfigError("signatures.minhash.num_perm",
                "must be a positive integer, got 'x'")``; unknown keys are rejected by name.
        """
        return _Parser(prefix).parse(d)


def signatures_enabled(d: Mapping[str, Any] | None, prefix: str = "signatures") -> bool:
    """Whether records are signed at all (``signatures.enabled``, default ``true``).

    ``false`` is plain sync: the daemon indexes each record's fields and no signature or candidate
    key, so neither the dedup worker nor the check API can run on that index (they refuse to
    start). Turning it back on needs a ``nearsync reindex`` to sign the records already indexed.

    Args:
        d: the ``signatures`` section (``None`` or ``{}`` → ``True``).
        prefix: dotted name of the section, used in error keys.
    Raises:
        ConfigError: ``signatures.enabled`` is not a boolean, or the section is not a mapping.
    """
    top = _Parser(prefix).mapping(d, prefix, tuple(_SECTIONS))
    return _Parser.boolean(top.get("enabled", True), _Parser(prefix).key("enabled"))


# --------------------------------------------------------------------------------------------- parsing

_SECTIONS: dict[str, tuple[str, ...]] = {
    "fields": (),
    "shingles": ("n", "max_body_chars"),
    "simhash": ("features", "blocks", "max_distance"),
    "minhash": ("num_perm",),
    "lsh": ("threshold", "bands", "rows", "keys"),
    "bottomk": ("k", "shingles"),
    "geohash": ("precision",),
    "super": ("rules", "title_tokens", "max_per_rule", "title_pairs"),
    "seed": (),
    "enabled": (),
}
_FIELD_KEYS = ("language", "stem", "stopwords", "fold_accents", "synonyms")


class _Parser:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def key(self, *parts: str) -> str:
        return ".".join(p for p in (self.prefix, *parts) if p)

    def mapping(self, value: Any, key: str, allowed: tuple[str, ...] | None) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"must be a mapping, got {value!r}")
        for k in value:
            if not isinstance(k, str):
                raise ConfigError(key, f"keys must be strings, got {k!r}")
            if allowed is not None and k not in allowed:
                raise ConfigError(f"{key}.{k}" if key else k, f"unknown key; expected one of {', '.join(allowed)}")
        return value

    @staticmethod
    def integer(value: Any, key: str, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"must be a positive integer, got {value!r}" if low >= 1 else f"must be an integer, got {value!r}")
        if not low <= value <= high:
            raise ConfigError(key, f"must be between {low} and {high}, got {value!r}")
        return value

    @classmethod
    def title_pairs(cls, value: Any, key: str) -> int:
        """``super.title_pairs``: 0 (none) or 2 to 16 sampled title tokens (1 would be no pair)."""
        if value == 0 and not isinstance(value, bool):
            return 0
        try:
            return cls.integer(value, key, 2, 16)
        except ConfigError:
            raise ConfigError(key, f"must be 0 (no word-pair keys) or between 2 and 16, got {value!r}") from None

    @staticmethod
    def boolean(value: Any, key: str) -> bool:
        if not isinstance(value, bool):
            raise ConfigError(key, f"must be true or false, got {value!r}")
        return value

    @staticmethod
    def choice(value: Any, key: str, options: tuple[str, ...]) -> str:
        if value not in options:
            raise ConfigError(key, f"must be one of {', '.join(options)}, got {value!r}")
        return str(value)

    def field_options(self, name: str, value: Any) -> TextOptions:
        key = self.key("fields", name)
        m = self.mapping(value, key, _FIELD_KEYS)
        synonyms = self.mapping(m.get("synonyms"), f"{key}.synonyms", None)
        for k, v in synonyms.items():
            if not isinstance(v, str) or not v.strip() or not k.strip():
                raise ConfigError(f"{key}.synonyms.{k}", f"must map a non-empty word to a non-empty string, got {v!r}")
        return TextOptions(
            language=self.choice(m.get("language", "english"), f"{key}.language", LANGUAGES),
            stem=self.boolean(m.get("stem", True), f"{key}.stem"),
            stopwords=self.boolean(m.get("stopwords", True), f"{key}.stopwords"),
            fold_accents=self.boolean(m.get("fold_accents", True), f"{key}.fold_accents"),
            synonyms=tuple(sorted((str(k), str(v)) for k, v in synonyms.items())),
        )

    def super_rules(self, value: Any, key: str) -> tuple[tuple[str, ...], ...]:
        if not isinstance(value, (list, tuple)) or len(value) > MAX_SUPER_RULES:
            raise ConfigError(key, f"must be a list of at most {MAX_SUPER_RULES} rules (lists of field roles), got {value!r}")
        rules: list[tuple[str, ...]] = []
        for i, rule in enumerate(value):
            if not isinstance(rule, (list, tuple)) or not 1 <= len(rule) <= 3 or len(set(rule)) != len(rule):
                raise ConfigError(f"{key}[{i}]", f"must be a list of 1 to 3 distinct field roles, got {rule!r}")
            rules.append(tuple(self.choice(c, f"{key}[{i}]", SUPER_COMPONENTS) for c in rule))
        return tuple(rules)

    def parse(self, d: Mapping[str, Any] | None) -> SignatureParams:
        top = self.mapping(d, self.prefix, tuple(_SECTIONS))
        self.boolean(top.get("enabled", True), self.key("enabled"))  # read by signatures_enabled
        sect: Callable[[str], Mapping[str, Any]] = lambda name: self.mapping(top.get(name), self.key(name), _SECTIONS[name])
        fields_map = self.mapping(top.get("fields"), self.key("fields"), None)
        fields = {"title": TextOptions(), "body": TextOptions()}
        for name, value in fields_map.items():
            fields[name] = self.field_options(name, value)
        sh, si, mh, lsh, bk, gh, sp = (sect(n) for n in ("shingles", "simhash", "minhash", "lsh", "bottomk", "geohash", "super"))
        defaults = SignatureParams()
        num_perm = self.integer(mh.get("num_perm", defaults.num_perm), self.key("minhash", "num_perm"), 1, 1024)
        threshold = lsh.get("threshold", defaults.lsh_threshold)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not (0.0 < float(threshold) < 1.0) or math.isnan(threshold):
            raise ConfigError(self.key("lsh", "threshold"), f"must be a number strictly between 0 and 1, got {threshold!r}")
        bands, rows = lsh.get("bands"), lsh.get("rows")
        if (bands is None) != (rows is None):
            raise ConfigError(self.key("lsh", "bands" if bands is None else "rows"), "bands and rows must be given together (or neither)")
        if bands is not None:
            bands = self.integer(bands, self.key("lsh", "bands"), 1, num_perm)
            rows = self.integer(rows, self.key("lsh", "rows"), 1, num_perm)
            if bands * rows > num_perm:
                raise ConfigError(self.key("lsh", "rows"), f"bands x rows = {bands * rows} exceeds minhash.num_perm = {num_perm}")
        blocks = self.integer(si.get("blocks", defaults.simhash_blocks), self.key("simhash", "blocks"), 1, 64)
        max_distance = si.get("max_distance", defaults.simhash_max_distance)
        max_distance = self.integer(max_distance, self.key("simhash", "max_distance"), 0, blocks - 1)
        if block_count(blocks, max_distance) > MAX_BLOCK_KEYS:
            raise ConfigError(self.key("simhash", "blocks"), f"layout gives {block_count(blocks, max_distance)} keys, more than {MAX_BLOCK_KEYS}")
        return SignatureParams(
            fields=tuple(fields.items()),
            shingle_n=self.integer(sh.get("n", defaults.shingle_n), self.key("shingles", "n"), 1, 16),
            max_body_chars=self.integer(sh.get("max_body_chars", defaults.max_body_chars), self.key("shingles", "max_body_chars"), 1, 10_000_000),
            simhash_features=self.choice(si.get("features", defaults.simhash_features), self.key("simhash", "features"), SIMHASH_FEATURES),
            simhash_blocks=blocks,
            simhash_max_distance=max_distance,
            num_perm=num_perm,
            lsh_threshold=float(threshold),
            lsh_bands=bands,
            lsh_rows=rows,
            lsh_keys=self.boolean(lsh.get("keys", defaults.lsh_keys), self.key("lsh", "keys")),
            bottomk_k=self.integer(bk.get("k", defaults.bottomk_k), self.key("bottomk", "k"), 1, 4096),
            bottomk_shingles=self.choice(bk.get("shingles", defaults.bottomk_shingles), self.key("bottomk", "shingles"), SHINGLE_KINDS),
            geohash_precision=self.integer(gh.get("precision", defaults.geohash_precision), self.key("geohash", "precision"), 1, 12),
            super_rules=self.super_rules(sp.get("rules", [list(r) for r in defaults.super_rules]), self.key("super", "rules")),
            super_title_tokens=self.integer(sp.get("title_tokens", defaults.super_title_tokens), self.key("super", "title_tokens"), 1, 16),
            super_max_per_rule=self.integer(sp.get("max_per_rule", defaults.super_max_per_rule), self.key("super", "max_per_rule"), 1, 256),
            super_title_pairs=self.title_pairs(sp.get("title_pairs", defaults.super_title_pairs), self.key("super", "title_pairs")),
            seed=self.integer(top.get("seed", defaults.seed), self.key("seed"), 0, 2**32 - 1),
        )
