"""PGBUS_REDIS_URL in its Redis Sentinel forms: the redis+sentinel:// URL and RQ's SENTINEL dict.

The failover itself, with real redis-server and redis-sentinel processes, is in
tests/processes/test_sentinel.py; here the parsing, its errors (which name the key and never
show a password) and the client the engine builds from it.
"""

from __future__ import annotations

import re

import pytest
from redis.sentinel import SentinelConnectionPool

from pgbus_flask import ConfigError
from pgbus_flask.config import SentinelURL, Settings, parse_value, sentinel_url
from pgbus_flask.engine import Engine
from tests.support import settings_for

SECRET = "S3CRET"


def test_a_sentinel_url_names_the_sentinels_the_service_and_the_database() -> None:
    url = "redis+sentinel://:pw@h1:26380,h2,[::1]:26381/mymaster/3?sentinel_password=sp&socket_timeout=2.5"
    assert parse_value("PGBUS_REDIS_URL", url) == url
    assert sentinel_url(url) == SentinelURL(
        sentinels=(("h1", 26380), ("h2", 26379), ("::1", 26381)), service="mymaster", db=3, password="pw",
        sentinel_password="sp", socket_timeout=2.5)
    assert sentinel_url("redis+sentinel://app:p%40w@h/my%20master") == SentinelURL(
        sentinels=(("h", 26379),), service="my master", username="app", password="p@w")
    assert sentinel_url("REDIS+SENTINEL://h:1/m/0?sentinel_username=s") == SentinelURL(
        sentinels=(("h", 1),), service="m", sentinel_username="s")
    assert Settings.from_environ({"PGBUS_REDIS_URL": url}).redis_url == url


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+sentinel://:S3CRET@h1:26379", "names no service"),
        ("redis+sentinel://:S3CRET@h1:26379/", "names no service"),
        ("redis+sentinel://:S3CRET@h1:99999/m/0", "bad port in 'h1:99999'"),
        ("redis+sentinel://:S3CRET@h1:port/m/0", "bad port in 'h1:port'"),
        ("redis+sentinel://:S3CRET@h1,,h2/m/0", "bad sentinel address ''"),
        ("redis+sentinel://:S3CRET@/m/0", "bad sentinel address ''"),
        ("redis+sentinel://:S3CRET@h1/m/zero", "bad database number 'zero'"),
        ("redis+sentinel://:S3CRET@h1/m/0/1", "too much path"),
        ("redis+sentinel://:S3CRET@h1/m/0?sentinel_password=S3CRET&retries=3", "unknown query parameter 'retries'"),
        ("redis+sentinel://:S3CRET@h1/m/0?socket_timeout=soon", "bad socket_timeout 'soon'"),
        ("redis+sentinel://:S3CRET@h1/m/0?socket_timeout=0", "bad socket_timeout '0'"),
        ("redis+sentinel://:S3CRET@[::1/m/0", "not a valid URL"),
        # a "/" in the password: the rest would be taken for the hosts (and shown)
        ("redis+sentinel://:S3/CRET@h1/m/0", "write '/', '?', '#' or '@' in a password as %2F"),
        ("redis+sentinel://:S3?CRET@h1/m/0", "write '/', '?', '#' or '@' in a password as %2F"),
        ("sentinel://:S3CRET@h1/m/0", "redis://, rediss:// or unix:// URL (or redis+sentinel://)"),
    ],
)
def test_a_bad_sentinel_url_is_named_without_its_passwords(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        Settings.load({"PGBUS_DATABASE_URL": "postgresql://u@h/db", "PGBUS_REDIS_URL": url})
    assert info.value.key == "PGBUS_REDIS_URL"
    assert str(info.value).startswith("PGBUS_REDIS_URL ")
    assert SECRET not in str(info.value)
    assert "***" in str(info.value)


def test_rq_s_sentinel_settings_become_a_sentinel_url() -> None:
    # The dict RQ's own settings file takes as SENTINEL (rq.cli.helpers.get_redis_from_config).
    rq_form = {"INSTANCES": [("h1", 26379), ("::1", 26380)], "MASTER_NAME": "mymaster", "DB": 2,
               "PASSWORD": "p@w", "SOCKET_TIMEOUT": 3, "SENTINEL_KWARGS": {"password": "sp"}}
    url = parse_value("PGBUS_REDIS_URL", rq_form)
    assert url == "redis+sentinel://:p%40w@h1:26379,[::1]:26380/mymaster/2?sentinel_password=sp&socket_timeout=3"
    assert sentinel_url(url) == SentinelURL(sentinels=(("h1", 26379), ("::1", 26380)), service="mymaster", db=2,
                                            password="p@w", sentinel_password="sp", socket_timeout=3.0)
    # RQ's defaults: localhost:26379, mymaster, database 0.
    assert parse_value("PGBUS_REDIS_URL", {}) == "redis+sentinel://localhost:26379/mymaster/0"
    assert sentinel_url(parse_value("PGBUS_REDIS_URL", {"USERNAME": "app"})).username == "app"
    # RQ's template lists every key without a value: an empty one takes RQ's default.
    assert parse_value("PGBUS_REDIS_URL", dict.fromkeys(["INSTANCES", "MASTER_NAME", "DB", "USERNAME", "PASSWORD",
                                                         "SOCKET_TIMEOUT", "SENTINEL_KWARGS"])) == \
        "redis+sentinel://localhost:26379/mymaster/0"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"CONNECTION_KWARGS": {"retry": 1}, "PASSWORD": SECRET}, "keys it cannot use: CONNECTION_KWARGS"),
        ({"SSL": True, "PASSWORD": SECRET}, "SSL is not supported"),
        ({"SENTINEL_KWARGS": {"ssl": True}, "PASSWORD": SECRET}, "SENTINEL_KWARGS may hold only"),
        ({"INSTANCES": ["h1:26379"], "PASSWORD": SECRET}, "INSTANCES must be a list of (host, port)"),
        ({"INSTANCES": [("h1", 99999)], "PASSWORD": SECRET}, "bad port"),
        ({"DB": "x", "PASSWORD": SECRET}, "bad database number"),
    ],
)
def test_bad_rq_sentinel_settings_say_what_is_wrong(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        parse_value("PGBUS_REDIS_URL", settings)
    assert info.value.key == "PGBUS_REDIS_URL"
    assert SECRET not in str(info.value)


def test_the_engine_asks_the_sentinels_for_the_master(pg_url: str) -> None:
    url = "redis+sentinel://app:pw@127.0.0.1:1,127.0.0.1:2/mymaster/4?sentinel_password=sp&socket_timeout=7"
    engine = Engine(Settings.load(settings_for(pg_url, url)))
    try:
        pool = engine.redis.connection_pool
        assert isinstance(pool, SentinelConnectionPool)
        assert pool.service_name == "mymaster" and pool.is_master
        assert pool.connection_kwargs["db"] == 4
        assert pool.connection_kwargs["password"] == "pw" and pool.connection_kwargs["username"] == "app"
        assert pool.connection_kwargs["socket_timeout"] == 7.0
        sentinels = pool.sentinel_manager.sentinels
        assert [s.connection_pool.connection_kwargs["port"] for s in sentinels] == [1, 2]
        assert all(s.connection_pool.connection_kwargs["password"] == "sp" for s in sentinels)
        assert engine.queue("default").connection is engine.redis
    finally:
        engine.close()


def test_a_plain_url_still_makes_a_plain_client(pg_url: str) -> None:
    engine = Engine(Settings.load(settings_for(pg_url, "redis://:pw@127.0.0.1:1/5")))
    try:
        pool = engine.redis.connection_pool
        assert type(pool).__name__ == "ConnectionPool"
        assert pool.connection_kwargs["db"] == 5 and pool.connection_kwargs["socket_timeout"] == 30
        assert pool.connection_kwargs["health_check_interval"] == 30
    finally:
        engine.close()
