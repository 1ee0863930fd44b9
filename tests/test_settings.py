"""Tuning knobs are validated settings: ``[daemon]`` keys, environment overrides named in errors."""

from __future__ import annotations

import pytest

from daemon.capture.loop import BatchSizer
from daemon.config import DaemonSettings, settings_from_mapping
from daemon.errors import ConfigError


def test_defaults_of_the_tuning_knobs() -> None:
    d = settings_from_mapping({}, env={}).daemon
    assert d.batch_bounds() == (50, 4000)
    assert d.chunk_rows_for(signed=True) == 250 and d.chunk_rows_for(signed=False) == 2500
    assert (d.health_max_stall_s, d.ready_max_lag_s, d.metrics_port) == (60.0, 60.0, None)
    sizer = BatchSizer.for_settings(d)
    assert (sizer.limit, sizer.floor, sizer.ceiling, sizer.target_s) == (500, 50, 4000, 1.0)


def test_file_keys_and_environment_overrides() -> None:
    toml = {"daemon": {"batch_floor": 7, "batch_ceiling": 70, "index_chunk_rows": 100, "metrics_port": 9187}}
    d = settings_from_mapping(toml, env={}).daemon
    assert d.batch_bounds() == (7, 70) and d.chunk_rows_for(signed=True) == 100 and d.metrics_port == 9187
    env = {"NEARSYNC_BATCH_CEILING": "90", "NEARSYNC_BATCH_TARGET_S": "0.5", "NEARSYNC_INDEX_CHUNK_ROWS": "40",
           "NEARSYNC_READY_MAX_LAG_S": "5", "NEARSYNC_HEALTH_MAX_STALL_S": "2.5", "NEARSYNC_METRICS_PORT": "9300",
           "NEARSYNC_METRICS_HOST": "127.0.0.1"}
    d = settings_from_mapping(toml, env=env).daemon  # the environment wins over the file
    assert d.batch_bounds() == (7, 90) and d.batch_target_s == 0.5 and d.chunk_rows_for(signed=False) == 40
    assert (d.ready_max_lag_s, d.health_max_stall_s, d.metrics_port, d.metrics_host) == (5, 2.5, 9300, "127.0.0.1")
    assert BatchSizer.for_settings(DaemonSettings(batch_size=500, batch_ceiling=20)).limit == 50  # floor 50 > 20


def test_a_backends_write_size_sets_the_part_and_the_floor_unless_configured() -> None:
    """A search backend's bulk size (``write_rows``) becomes the signed part size and the batch
    floor; a configured ``index_chunk_rows`` / ``batch_floor`` wins, and plain sync keeps its own."""
    from daemon.backends.base import preferred_write_rows
    from daemon.backends.factory import create_search_backend

    be = create_search_backend("opensearch", {"bulk_docs": 1500})
    assert preferred_write_rows(be) == 1500 and preferred_write_rows(object()) is None
    d = settings_from_mapping({}, env={}).daemon
    assert d.chunk_rows_for(signed=True, preferred=1500) == 1500 and d.chunk_rows_for(signed=False, preferred=1500) == 2500
    raised = d.for_write_rows(1500)
    assert raised.batch_bounds() == (1500, 4000) and BatchSizer.for_settings(raised).limit == 1500
    assert d.for_write_rows(9000).batch_bounds() == (4000, 4000) and d.for_write_rows(None) is d
    mine = settings_from_mapping({"daemon": {"batch_floor": 7, "index_chunk_rows": 100}}, env={}).daemon
    assert mine.for_write_rows(1500) is mine and mine.chunk_rows_for(signed=True, preferred=1500) == 100


@pytest.mark.parametrize(("env", "named"), [
    ({"NEARSYNC_MODE": "fast"}, "NEARSYNC_MODE (daemon.mode)"),
    ({"NEARSYNC_METRICS_PORT": "abc"}, "NEARSYNC_METRICS_PORT (daemon.metrics_port)"),
    ({"NEARSYNC_METRICS_PORT": "99999"}, "NEARSYNC_METRICS_PORT (daemon.metrics_port)"),
    ({"NEARSYNC_INDEX_CHUNK_ROWS": "-3"}, "NEARSYNC_INDEX_CHUNK_ROWS (daemon.index_chunk_rows)"),
    ({"NEARSYNC_BATCH_FLOOR": "1.5"}, "NEARSYNC_BATCH_FLOOR (daemon.batch_floor)"),
    ({"NEARSYNC_READY_MAX_LAG_S": "0"}, "NEARSYNC_READY_MAX_LAG_S (daemon.ready_max_lag_s)"),
])
def test_a_bad_environment_value_fails_fast_naming_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as e:
        settings_from_mapping({}, env=env)
    assert e.value.key == named
    assert named in str(e.value)


@pytest.mark.parametrize(("daemon", "key"), [
    ({"metrics_port": 0}, "daemon.metrics_port"),
    ({"metrics_port": "9187"}, "daemon.metrics_port"),
    ({"batch_target_s": -1}, "daemon.batch_target_s"),
    ({"metrics_host": ""}, "daemon.metrics_host"),
    ({"batch_florr": 3}, "daemon.batch_florr"),
])
def test_a_bad_file_value_names_the_key(daemon: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as e:
        settings_from_mapping({"daemon": daemon}, env={})
    assert e.value.key == key


def test_dedup_profile_is_validated_and_the_file_applies_on_top() -> None:
    from daemon.dedup.settings import dedup_options
    from daemon.signatures import SignatureParams

    plain = settings_from_mapping({}, env={})
    assert plain.profile == "classified" and dedup_options(plain).scoring.scope == "user"
    s = settings_from_mapping({"dedup": {"profile": "products", "fields": {"price": {"tolerance": 0.2}}}}, env={})
    opts = dedup_options(s)
    assert s.profile == "products" and opts.scoring.scope == "global"
    price = opts.scoring.field("price")
    assert price is not None and price.evidence == "positive" and price.params["tolerance"] == 0.2
    sp = SignatureParams.from_mapping(s.signatures)
    assert sp.super_rules == (("model",),) and sp.super_title_pairs == 8
    with pytest.raises(ConfigError) as e:
        settings_from_mapping({"dedup": {"profile": "shops"}}, env={})
    assert e.value.key == "dedup.profile"
