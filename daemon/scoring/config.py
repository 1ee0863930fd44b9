"""Scoring configuration: which fields are compared, how, how much they weigh, and the thresholds.

Everything here is an immutable value object built once from the ``dedup`` section of the settings
by :meth:`ScoringConfig.from_mapping`, which validates every key and raises
:class:`daemon.errors.ConfigError` naming the dotted key on the first problem (unknown keys too).

Settings shape (all optional; ``ScoringConfig.from_mapping({})`` gives the defaults)::

    dedup:
      duplicate_threshold: 90      # 0-100; score >= it -> "duplicate" (auto-reject)
      potential_threshold: 70      # 0-100, <= duplicate; score >= it -> "potential_duplicate"
      candidate_cap: 50            # max candidates scored per record (>= 1)
      scope: user                  # user | group | category | global
      strong_negative_cap: true    # disjoint model numbers/phones/e-mails forbid auto-reject
      single_field_cap: true       # one text field alone, not the same text, forbids auto-reject
      fields:                      # merged over the defaults, per field; `null` drops a field
        title: {metric: token_set, weight: 3}
        price: {metric: price, weight: 1, tolerance: 0.3}
        body: {metric: jaccard, weight: 1, evidence: positive}   # counts only when it raises the score
      cluster: {method: average, max_size: 50, min_density: 0.3, resolution: 1.0, seed: 42}
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from daemon.errors import ConfigError
from daemon.scoring.rarity import RARITY_SHARE, Rarity

#: Metric name -> {parameter name: default}. Parameters of a metric are only accepted with it.
METRIC_PARAMS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        # rapidfuzz JaroWinkler (Winkler 1990); prefix_weight <= 0.25 keeps the result in [0, 1].
        "jaro_winkler": MappingProxyType({"prefix_weight": 0.1}),
        # rapidfuzz Levenshtein normalized similarity, 1 - d / max(len(a), len(b)).
        "levenshtein": MappingProxyType({}),
        # rapidfuzz fuzz.token_set_ratio / 100.
        "token_set": MappingProxyType({}),
        # Jaccard of the text shingles estimated from the signature: "minhash" or "bottomk".
        "jaccard": MappingProxyType({"estimator": "minhash"}),
        # Simhash Hamming distance d mapped to max(0, 1 - d / max_distance).
        "simhash": MappingProxyType({"max_distance": 24}),
        # Set overlap of normalised values (signature list of the same name, or the field value);
        # partial: similarity given when one value is a prefix of another of >= partial_min_len
        # characters (e.g. "FS105" / "FS105NA"), 0 disables; negative: disjoint -> 0 (else None).
        # ignore_quantities: drop "1080p", "120hz"-like values (see metrics.is_quantity).
        # title_first: when both titles carry model numbers, compare those (a body may name
        # compatible products; the title names the one for sale); titles that disagree still match
        # when one title's model number is named anywhere in the other record (a typo in a title);
        # one title's all-digit item number against the other's letters-and-digits model number is
        # no evidence either way (two numbering schemes: metrics.separate_schemes).
        # suffix_digits: compare digit-only values by their last N digits (phone numbers written
        # with and without the country code, metrics.digit_suffixes); 0 compares them whole.
        "exact": MappingProxyType(
            {"partial": 0.0, "partial_min_len": 4, "negative": True, "ignore_quantities": False,
             "common_prefix": True, "title_first": False, "suffix_digits": 0}
        ),
        # Relative price difference |a-b| / max(a, b): 1 when equal, 0 at `tolerance` and beyond.
        "price": MappingProxyType({"tolerance": 0.3}),
        # Haversine distance between (lat_key, lon_key): 1 at 0 m, 0 at `radius_m` and beyond.
        "geo": MappingProxyType({"radius_m": 2000.0, "lat_key": "lat", "lon_key": "lon"}),
        # Evidence against only (0 or no evidence): the titles' numbers conflict (metrics.numbers_conflict).
        "numbers": MappingProxyType({}),
        # Evidence against only: the titles name different colours (metrics.colours_conflict).
        "colours": MappingProxyType({}),
        # Evidence against only: otherwise equal titles name different codes the model-number rule
        # does not see (digit-less capitals, 3-character codes; metrics.variants_conflict).
        "variants": MappingProxyType({}),
        # Evidence against only: the prices differ by `gap` or more (relative; metrics.price_conflict).
        "price_gap": MappingProxyType({"gap": 0.5}),
        # A number field (a year, a count, a size): max(0, 1 - d / tolerance), d = |a - b| in the
        # field's units, or |a - b| / max(|a|, |b|) with relative = true (numbers.numeric_similarity).
        # Default tolerance 2 (absolute), made for years, the commonest such field: the same year 1,
        # one year apart 0.5 (two sources often date a work by its preprint or its print edition),
        # two or more apart 0. Set it for other units (e.g. relative = true, tolerance = 0.1).
        "numeric": MappingProxyType({"tolerance": 2.0, "relative": False}),
        # An ISO 8601 date or timestamp: max(0, 1 - days apart / max_days) (numbers.date_similarity).
        # Default 30 days: two sources recording one event or listing a few days apart still agree
        # (a week apart: 0.77), a month or more apart is no evidence.
        "date": MappingProxyType({"max_days": 30.0}),
    }
)

SCOPES = ("user", "group", "category", "global")
CLUSTER_METHODS = ("average", "leiden")
"""Values of ``cluster.method`` (see :class:`ClusterConfig`)."""
EVIDENCE = ("both", "positive")
"""Values of a field's ``evidence`` setting (see :class:`FieldSpec`)."""

#: Default fields, tuned by reasoning for classified ads and product listings (see module docs
#: of :mod:`daemon.scoring.combine`): the model number is the strongest evidence, then the title.
#:
#: Evidence against a match, with its stated weight (a conflict enters the weighted mean as a
#: similarity of 0 at that weight and, with ``strong_negative_cap``, forbids auto-rejection):
#:
#: * ``models`` (4.0): both titles name model numbers (or all-digit catalogue numbers: dates, spans
#:   of years and the record's own price aside, :func:`daemon.signatures.extract.is_calendar` and
#:   :func:`~daemon.signatures.extract.is_price`) and each
#:   has one the other lacks, neither equal nor a prefix variant
#:   (``FS105`` / ``FS105NA`` is one product, ``CSIA4BK`` / ``CSIA4C`` two colours, ``MB565LL``
#:   / ``MB913LL`` two products); the titles' own model numbers are compared when both have some
#:   (``title_first``), since a body may name compatible products, unless one title's model number
#:   is named anywhere in the other record, or unless one title's unshared codes are all-digit item
#:   numbers and the other's letters-and-digits model numbers (``26110`` / ``COOLPIXS550PL``: two
#:   numbering schemes, no evidence either way). A prefix variant is half evidence (``partial`` 0.5):
#:   in one seller's ads ``CNP2000`` / ``CNP2000H`` or ``SX110IS`` / ``SX110ISB`` are most often the
#:   seller's two variants of a product line, while a repost copies its model number as it was; the
#:   ``products`` profile gives it 0.9 (shops append their own regional or packaging suffix to the
#:   maker's number, ``FS105`` / ``FS105NA``);
#: * ``numbers`` (2.0): the titles' sizes, capacities or versions conflict (``40'`` / ``46'``,
#:   ``120GB`` / ``16GB``, ``Passport 8500`` / ``9500ci``): a product line's other item;
#: * ``colours`` (3.0): otherwise equal titles name different colours (``Black`` / ``Red``),
#:   garment sizes (``size M`` / ``size L``) or values of another attribute of an item
#:   (:data:`~daemon.scoring.metrics.ATTRIBUTES`: ``mens`` / ``womens``, ``left`` / ``right``,
#:   ``petrol`` / ``diesel``, ``single`` / ``double``): part of the item, nearly as telling as a
#:   model number;
#: * ``variants`` (3.0): otherwise equal titles name different codes that are no model numbers
#:   (``EFSATB`` / ``EFSATS`` without digits, ``G10`` / ``SX10IS`` too short), or two tiers of one
#:   line (``Galaxy S21`` / ``S21+``, ``iPhone 12 Pro`` / ``12 Pro Max``): the code is the item,
#:   as telling as a colour;
#: * ``price_gap`` (2.0): one price at most half the other: not the same item at the same terms.
#:
#: With title 0.95 and body 0.5 alike, one such conflict takes a pair from 84 to about 56 (not
#: flagged); a conflict-free pair is unaffected.
PHONE_SUFFIX_DIGITS = 9
"""Digits by which two phone numbers are compared, from the right (the ``phones`` field's
``suffix_digits``): a seller writes one number with or without the country code and trunk prefix
(``06 12 34 56 78`` / ``+33 6 12 34 56 78``, ``07700 900123`` / ``+44 7700 900123``, ``(555)
123-4567`` / ``+1 555 123 4567``), which leave the last nine digits alone; nine tell apart the
numbers of one country's plan (French mobiles ``06…`` and ``07…`` differ in the ninth digit from
the right). Numbers of fewer digits are compared whole."""


DEFAULT_FIELDS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "title": {"metric": "token_set", "weight": 3.0},
        "models": {
            "metric": "exact", "weight": 4.0, "partial": 0.5, "partial_min_len": 4,
            "ignore_quantities": True, "common_prefix": False, "title_first": True,
        },
        "numbers": {"metric": "numbers", "weight": 2.0},
        "colours": {"metric": "colours", "weight": 3.0},
        "variants": {"metric": "variants", "weight": 3.0},
        "price_gap": {"metric": "price_gap", "weight": 2.0, "gap": 0.5},
        "body": {"metric": "jaccard", "weight": 1.0},
        "phones": {"metric": "exact", "weight": 1.5, "suffix_digits": PHONE_SUFFIX_DIGITS},
        "emails": {"metric": "exact", "weight": 1.5},
        "price": {"metric": "price", "weight": 1.0, "tolerance": 0.3},
        "location": {"metric": "geo", "weight": 1.0, "radius_m": 2000.0},
    }
)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """How one field (role) is compared.

    Attributes:
        name: the field role (``title``, ``body``, ``price``...), a signature list (``models``,
            ``phones``, ``emails``), or any other field mapped in ``[source.fields]`` (``authors``,
            ``year``: such a field must name its metric); ``location`` with the ``geo`` metric
            reads ``lat``/``lon``.
        metric: one of :data:`METRIC_PARAMS`.
        weight: relative weight (> 0) in the weighted mean.
        params: the metric's parameters, defaults filled in (read-only mapping).
        evidence: ``"both"`` (default): the similarity always enters the weighted mean, so a low
            value lowers the score; ``"positive"``: it enters only when it raises the score (a
            match is evidence of a duplicate, a mismatch is not evidence against one). For fields
            that sources write independently, e.g. each shop's own description of a product.
    """

    name: str
    metric: str
    weight: float
    params: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    evidence: str = "both"


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Cluster splitting settings (see :func:`daemon.dedup.clusters.build_clusters`).

    Attributes:
        max_size: a connected component with more members is split (>= 2).
        min_density: a component whose link density ``links / (n(n-1)/2)`` is lower is split
            (0-1).
        resolution: Leiden resolution parameter (> 0; higher gives smaller communities).
        seed: random seed of the community detection (deterministic output).
        method: ``"average"`` (default): average-link clustering stopped at the potential
            threshold, so records do not chain (:func:`daemon.dedup.clusters.average_link_clusters`;
            ``max_size`` bounds a cluster, the other keys are unused); ``"leiden"``: union-find
            components split by Leiden when larger than ``max_size`` or sparser than ``min_density``.
    """

    max_size: int = 50
    min_density: float = 0.3
    resolution: float = 1.0
    seed: int = 42
    method: str = "average"


@dataclass(frozen=True, slots=True)
class ScoringConfig:
    """The whole scoring configuration (immutable).

    Attributes:
        fields: the compared fields, in a stable order.
        duplicate_threshold: score (0-100) from which a pair is a ``"duplicate"``.
        potential_threshold: score (0-100, <= duplicate) from which it is ``"potential_duplicate"``.
        candidate_cap: maximum number of candidates scored per record.
        scope: where candidates are looked for: ``user``, ``group``, ``category`` or ``global``.
        strong_negative_cap: when True, a pair whose model numbers, phones or e-mails are both
            present and disjoint has its score capped just below ``duplicate_threshold``, so it
            can go to a moderator but is never auto-rejected.
        single_field_cap: when True, a pair whose score rests on one text field alone (the only
            field counted is a ``token_set``, ``levenshtein`` or ``jaro_winkler`` one, typically
            the title of records with nothing else to compare, such as news headlines) and whose
            two texts are not the same once normalised has its score capped just below
            ``duplicate_threshold`` too. One field is one piece of evidence: ``token_set`` scores
            a short title whose words all appear in a longer one 100 (``Titanfall Review`` /
            ``Will 'Titanfall' Boost Xbox One? (Game Review)``), which is right for a repost with
            a shortened title when its price or text agree as well, and not enough to reject a
            record unseen. Equal titles, or a second field counted (a price, a description, a
            model number), are not capped; no threshold is involved.
        cluster: cluster splitting settings.
        rarity: share (0-1) of the title's similarity that comes from token rarity when a
            document-frequency snapshot is attached (``[dedup] rarity``; see
            :mod:`daemon.scoring.rarity`): the title field's similarity is
            ``(1 - rarity) * s + rarity * weighted_overlap``, where ``s`` is its configured metric.
            Default :data:`~daemon.scoring.rarity.RARITY_SHARE` (0.25, explained there); 0 turns
            rarity off. Without a snapshot scores are those without rarity, bit for bit.
        snapshot: the attached snapshot (:meth:`with_snapshot`), or None (no rarity, whatever
            ``rarity`` says). Compared by version only.
    """

    fields: tuple[FieldSpec, ...]
    duplicate_threshold: float = 90.0
    potential_threshold: float = 70.0
    candidate_cap: int = 50
    scope: str = "user"
    strong_negative_cap: bool = True
    single_field_cap: bool = True
    cluster: ClusterConfig = ClusterConfig()
    rarity: float = RARITY_SHARE
    snapshot: Rarity | None = None

    def with_snapshot(self, snapshot: Rarity | None) -> ScoringConfig:
        """This configuration with ``snapshot`` (a :class:`~daemon.scoring.rarity.Rarity`, or None)
        attached; a new object, this one unchanged."""
        return dataclasses.replace(self, snapshot=snapshot)

    @property
    def uses_rarity(self) -> bool:
        """True when the title is scored with rarity: a snapshot is attached and ``rarity`` > 0."""
        return self.snapshot is not None and self.rarity > 0.0

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any] | None, prefix: str = "dedup") -> ScoringConfig:
        """Build and validate a configuration from a plain mapping (e.g. parsed TOML/YAML).

        Args:
            d: the ``dedup`` section; ``None`` or ``{}`` gives the defaults.
            prefix: dotted prefix used in error keys (``"dedup"`` -> ``"dedup.fields.title.weight"``).

        Returns:
            The validated :class:`ScoringConfig`.

        Raises:
            ConfigError: on an unknown key, a wrong type or an out-of-range value; ``.key`` is the
                dotted key, e.g. ``"dedup.potential_threshold"``.
        """
        d = {} if d is None else d
        _require_mapping(d, prefix)
        allowed = {
            "duplicate_threshold", "potential_threshold", "candidate_cap", "scope",
            "strong_negative_cap", "single_field_cap", "fields", "cluster", "rarity",
        }
        _reject_unknown(d, allowed, prefix)
        dup = _number(d, "duplicate_threshold", 90.0, prefix, lo=0.0, hi=100.0)
        pot = _number(d, "potential_threshold", 70.0, prefix, lo=0.0, hi=100.0)
        if pot > dup:
            raise ConfigError(
                f"{prefix}.potential_threshold",
                f"must be <= duplicate_threshold ({dup}), got {pot}",
            )
        cap = _integer(d, "candidate_cap", 50, prefix, lo=1)
        scope = d.get("scope", "user")
        if scope not in SCOPES:
            raise ConfigError(f"{prefix}.scope", f"must be one of {', '.join(SCOPES)}, got {scope!r}")
        neg_cap = _boolean(d, "strong_negative_cap", True, prefix)
        one_cap = _boolean(d, "single_field_cap", True, prefix)
        fields_ = _parse_fields(d.get("fields"), f"{prefix}.fields")
        cluster = _parse_cluster(d.get("cluster"), f"{prefix}.cluster")
        rarity = _number(d, "rarity", RARITY_SHARE, prefix, lo=0.0, hi=1.0)
        return cls(
            fields=fields_, duplicate_threshold=dup, potential_threshold=pot, candidate_cap=cap,
            scope=scope, strong_negative_cap=neg_cap, single_field_cap=one_cap, cluster=cluster, rarity=rarity,
        )

    def field(self, name: str) -> FieldSpec | None:
        """Return the spec of field ``name``, or None when it is not compared."""
        for spec in self.fields:
            if spec.name == name:
                return spec
        return None


def _require_mapping(value: Any, key: str) -> None:
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"must be a mapping, got {type(value).__name__}")


def _reject_unknown(d: Mapping[str, Any], allowed: set[str], prefix: str) -> None:
    for k in d:
        if k not in allowed:
            raise ConfigError(f"{prefix}.{k}", f"unknown key; expected one of {', '.join(sorted(allowed))}")


def _number(
    d: Mapping[str, Any], name: str, default: float, prefix: str, *,
    lo: float | None = None, hi: float | None = None, lo_open: bool = False,
) -> float:
    key = f"{prefix}.{name}"
    value = d.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(key, f"must be a finite number, got {value!r}")
    value = float(value)
    if lo is not None and (value <= lo if lo_open else value < lo):
        raise ConfigError(key, f"must be {'>' if lo_open else '>='} {lo}, got {value}")
    if hi is not None and value > hi:
        raise ConfigError(key, f"must be <= {hi}, got {value}")
    return value


def _integer(d: Mapping[str, Any], name: str, default: int, prefix: str, *, lo: int) -> int:
    key = f"{prefix}.{name}"
    value = d.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, f"must be an integer, got {value!r}")
    if value < lo:
        raise ConfigError(key, f"must be >= {lo}, got {value}")
    return value


def _boolean(d: Mapping[str, Any], name: str, default: bool, prefix: str) -> bool:
    """``d[name]`` (``default`` when absent), which must be a boolean. Raises ConfigError naming
    ``prefix.name``."""
    value = d.get(name, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{prefix}.{name}", f"must be a boolean, got {value!r}")
    return value


def _parse_fields(raw: Any, prefix: str) -> tuple[FieldSpec, ...]:
    merged: dict[str, Any] = {name: dict(entry) for name, entry in DEFAULT_FIELDS.items()}
    if raw is not None:
        _require_mapping(raw, prefix)
        for name, entry in raw.items():
            key = f"{prefix}.{name}"
            if not isinstance(name, str) or not name:
                raise ConfigError(key, "field names must be non-empty strings")
            if entry is None:
                merged.pop(name, None)
                continue
            _require_mapping(entry, key)
            base = merged.get(name, {})
            if "metric" in entry and entry["metric"] != base.get("metric"):
                base = {}  # another metric: the default's parameters no longer apply
            merged[name] = {**base, **entry}
    if not merged:
        raise ConfigError(prefix, "at least one field must be compared")
    specs = []
    for name, entry in merged.items():
        specs.append(_parse_field(name, entry, f"{prefix}.{name}"))
    return tuple(specs)


def _parse_field(name: str, entry: Mapping[str, Any], prefix: str) -> FieldSpec:
    metric = entry.get("metric")
    if metric is None and name not in DEFAULT_FIELDS:
        raise ConfigError(f"{prefix}.metric", f"is required: field {name!r} has no default metric "
                                              f"(one of {', '.join(METRIC_PARAMS)})")
    if metric not in METRIC_PARAMS:
        raise ConfigError(f"{prefix}.metric", f"must be one of {', '.join(METRIC_PARAMS)}, got {metric!r}")
    defaults = METRIC_PARAMS[metric]
    _reject_unknown(entry, {"metric", "weight", "evidence", *defaults}, prefix)
    if "weight" not in entry:
        raise ConfigError(f"{prefix}.weight", "is required")
    weight = _number(entry, "weight", 1.0, prefix, lo=0.0, lo_open=True)
    evidence = entry.get("evidence", "both")
    if evidence not in EVIDENCE:
        raise ConfigError(f"{prefix}.evidence", f"must be one of {', '.join(EVIDENCE)}, got {evidence!r}")
    params: dict[str, Any] = {}
    for pname, pdefault in defaults.items():
        key = f"{prefix}.{pname}"
        value = entry.get(pname, pdefault)
        if pname == "prefix_weight":
            value = _number(entry, pname, pdefault, prefix, lo=0.0, hi=0.25)
        elif pname == "estimator":
            if value not in ("minhash", "bottomk"):
                raise ConfigError(key, f"must be 'minhash' or 'bottomk', got {value!r}")
        elif pname == "max_distance":
            value = _integer(entry, pname, pdefault, prefix, lo=1)
            if value > 64:
                raise ConfigError(key, f"must be <= 64, got {value}")
        elif pname == "partial":
            value = _number(entry, pname, pdefault, prefix, lo=0.0, hi=1.0)
        elif pname == "partial_min_len":
            value = _integer(entry, pname, pdefault, prefix, lo=1)
        elif pname == "suffix_digits":
            value = _integer(entry, pname, pdefault, prefix, lo=0)
        elif pname == "gap":
            value = _number(entry, pname, pdefault, prefix, lo=0.0, hi=1.0, lo_open=True)
        elif pname in ("negative", "ignore_quantities", "common_prefix", "title_first", "relative"):
            value = _boolean(entry, pname, pdefault, prefix)
        elif pname in ("tolerance", "radius_m", "max_days"):
            value = _number(entry, pname, pdefault, prefix, lo=0.0, lo_open=True)
        elif pname in ("lat_key", "lon_key"):
            if not isinstance(value, str) or not value:
                raise ConfigError(key, f"must be a non-empty string, got {value!r}")
        params[pname] = value
    return FieldSpec(name=name, metric=metric, weight=weight, params=MappingProxyType(params), evidence=evidence)


def _parse_cluster(raw: Any, prefix: str) -> ClusterConfig:
    if raw is None:
        return ClusterConfig()
    _require_mapping(raw, prefix)
    _reject_unknown(raw, {"max_size", "min_density", "resolution", "seed", "method"}, prefix)
    method = raw.get("method", "average")
    if method not in CLUSTER_METHODS:
        raise ConfigError(f"{prefix}.method", f"must be one of {', '.join(CLUSTER_METHODS)}, got {method!r}")
    return ClusterConfig(
        method=method,
        max_size=_integer(raw, "max_size", 50, prefix, lo=2),
        min_density=_number(raw, "min_density", 0.3, prefix, lo=0.0, hi=1.0),
        resolution=_number(raw, "resolution", 1.0, prefix, lo=0.0, lo_open=True),
        seed=_integer(raw, "seed", 42, prefix, lo=0),
    )
