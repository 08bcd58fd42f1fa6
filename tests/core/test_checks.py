"""System checks report bad DISTLOCK settings with exact ids and hints."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.checks import Error, Warning
from django.test import override_settings

from distlock.checks import check_settings
from distlock.exceptions import InvalidLockBackendError
from distlock.handler import MINIMAL_SETTING, locks

REDIS = "distlock.backends.redis.RedisBackend"
URL = "redis://127.0.0.1:1/0"


def check(distlock_setting: Any = ..., **other: Any) -> list[Any]:
    overrides = dict(other)
    if distlock_setting is not ...:
        overrides["DISTLOCK"] = distlock_setting
    with override_settings(**overrides):
        if distlock_setting is ...:
            from django.conf import settings

            del settings.DISTLOCK
        return check_settings()


def test_valid_settings_pass() -> None:
    assert check({"default": {"BACKEND": REDIS, "LOCATION": URL}}) == []


def test_missing_setting_is_e001_with_a_minimal_example() -> None:
    locmem_cache = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    assert check(CACHES=locmem_cache) == [
        Error(
            "The DISTLOCK setting is missing and CACHES['default'] is not a django-redis cache, "
            "so distlock has no lock server.",
            hint=f"Add to your settings: {MINIMAL_SETTING}",
            id="distlock.E001",
        )
    ]


def test_missing_setting_with_django_redis_cache_uses_the_cache() -> None:
    caches = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": URL}}
    assert check(CACHES=caches) == []
    with override_settings(CACHES=caches):
        from django.conf import settings

        del settings.DISTLOCK
        assert type(locks["default"]).__name__ == "DjangoRedisBackend"


def test_not_a_dict_is_e002() -> None:
    assert check(["redis://"]) == [
        Error(
            "DISTLOCK must be a dict mapping alias names to dicts, like CACHES.",
            hint=f"For example: {MINIMAL_SETTING}",
            id="distlock.E002",
        )
    ]


def test_no_default_alias_is_e003() -> None:
    assert check({"other": {"BACKEND": REDIS, "LOCATION": URL}}) == [
        Error(
            "DISTLOCK has no alias 'default' (it has: other).",
            hint="Add DISTLOCK['default'] or pass an existing alias as using=.",
            id="distlock.E003",
        )
    ]


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        ("distlock.backends.nope.Backend", "could not be imported"),
        ("django.core.cache.backends.redis.RedisCache", "must be the dotted path of a lock"),
        (None, "must be the dotted path of a lock backend"),
    ],
)
def test_bad_backend_is_e004(backend: Any, message: str) -> None:
    [error] = check({"default": {"BACKEND": backend, "LOCATION": URL}})
    assert error.id == "distlock.E004" and message in error.msg and error.hint


@pytest.mark.parametrize("location", [None, "", "http://x", "redis://host:notaport/0", 6379])
def test_bad_location_is_e005(location: Any) -> None:
    [error] = check({"default": {"BACKEND": REDIS, "LOCATION": location}})
    assert error == Error(
        error.msg,
        hint="For example 'LOCATION': 'redis://127.0.0.1:6379/0' (or rediss://, unix://).",
        id="distlock.E005",
    )
    assert "LOCATION" in error.msg


def test_password_never_appears_in_messages() -> None:
    [error] = check({"default": {"BACKEND": REDIS, "LOCATION": "redis://:hunter2@h:bad/0"}})
    assert "hunter2" not in error.msg and "***" in error.msg


@pytest.mark.parametrize(
    "options",
    [
        "socket_timeout=1",
        {"socket_timeout": "1"},
        {"socket_timeout": -1},
        {"socket_timeout": True},
        {"no_such_client_option": 1},
        {"NOT_AN_OPTION": 1},
    ],
)
def test_bad_options_are_e006(options: Any) -> None:
    [error] = check({"default": {"BACKEND": REDIS, "LOCATION": URL, "OPTIONS": options}})
    assert error.id == "distlock.E006" and error.hint


@pytest.mark.parametrize("timeout", [0, -5, "60", True, float("nan"), float("inf"), None])
def test_bad_timeout_is_e007(timeout: Any) -> None:
    [error] = check({"default": {"BACKEND": REDIS, "LOCATION": URL, "TIMEOUT": timeout}})
    assert error.id == "distlock.E007"
    assert error.hint == "TIMEOUT is the default lease in seconds, e.g. 60."


@pytest.mark.parametrize("prefix", ["", "a{b}", "has space", 5, "a*"])
def test_bad_key_prefix_is_e008(prefix: Any) -> None:
    [error] = check({"default": {"BACKEND": REDIS, "LOCATION": URL, "KEY_PREFIX": prefix}})
    assert error.id == "distlock.E008"


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252", "no-such-codec", 8])
def test_a_non_ascii_prefix_with_a_client_encoding_other_than_utf8_is_e008(
    encoding: Any,
) -> None:
    """Keys are UTF-8 on the wire: the client would write the prefix as other bytes in the
    calls it encodes (one lock's keys under two prefixes)."""
    [error] = check(
        {
            "default": {
                "BACKEND": REDIS,
                "LOCATION": URL,
                "KEY_PREFIX": "verrou-café",
                "OPTIONS": {"encoding": encoding},
            }
        }
    )
    assert error.id == "distlock.E008"
    assert "non-ASCII" in error.msg and repr(encoding) in error.msg
    assert "encoding" in (error.hint or "")


@pytest.mark.parametrize("options", [{}, {"encoding": "utf-8"}, {"encoding": "UTF8"}])
def test_a_non_ascii_prefix_with_utf8_is_accepted(options: dict[str, Any]) -> None:
    setting = {"BACKEND": REDIS, "LOCATION": URL, "KEY_PREFIX": "verrou-café", "OPTIONS": options}
    assert check({"default": setting}) == []


def test_an_ascii_prefix_takes_any_client_encoding() -> None:
    setting = {"BACKEND": REDIS, "LOCATION": URL, "OPTIONS": {"encoding": "latin-1"}}
    assert check({"default": setting}) == []


def test_unknown_key_is_e009() -> None:
    assert check({"default": {"BACKEND": REDIS, "LOCATON": URL}})[0].id == "distlock.E009"


def test_django_redis_backend_needs_a_django_redis_cache() -> None:
    [error] = check(
        {
            "default": {
                "BACKEND": "distlock.backends.django_redis.DjangoRedisBackend",
                "OPTIONS": {"CACHE": "default"},
            }
        },
        CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
    )
    assert error.id == "distlock.E005" and "not a django-redis cache" in error.msg


def test_locmem_without_debug_warns() -> None:
    setting = {"default": {"BACKEND": "distlock.backends.locmem.LocMemBackend"}}
    assert check(setting, DEBUG=True) == []
    assert check(setting, DEBUG=False) == [
        Warning(
            "DISTLOCK['default'] uses LocMemBackend with DEBUG = False: its locks exist in one "
            "process only and do not exclude other processes or hosts.",
            hint="Use distlock.backends.redis.RedisBackend (or another Redis backend) in "
            "production.",
            id="distlock.W001",
        )
    ]


def test_check_runs_through_manage_py_check() -> None:
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    bad = override_settings(DISTLOCK={"default": {"BACKEND": REDIS, "LOCATION": "ftp://x"}})
    with bad, pytest.raises(SystemCheckError, match=r"distlock\.E005"):
        call_command("check")


def test_lock_on_bad_settings_raises_the_same_error() -> None:
    import distlock

    bad = override_settings(DISTLOCK={"default": {"BACKEND": REDIS, "LOCATION": "ftp://x"}})
    with bad, pytest.raises(InvalidLockBackendError, match="LOCATION"):
        distlock.lock("x").acquire()


EXACT_ERRORS = [
    (
        {"BACKEND": "distlock.backends.nope.Backend", "LOCATION": URL},
        Error(
            "DISTLOCK['default']['BACKEND'] 'distlock.backends.nope.Backend' could not be "
            "imported: No module named 'distlock.backends.nope'",
            hint="Use one of distlock.backends.redis.RedisBackend, "
            "distlock.backends.redlock.RedlockBackend, distlock.backends.django_redis."
            "DjangoRedisBackend, distlock.backends.locmem.LocMemBackend.",
            id="distlock.E004",
        ),
    ),
    (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": URL},
        Error(
            "DISTLOCK['default']['BACKEND'] must be the dotted path of a lock backend class, not "
            "'django.core.cache.backends.redis.RedisCache'.",
            hint="For example 'distlock.backends.redis.RedisBackend'.",
            id="distlock.E004",
        ),
    ),
    (
        {"BACKEND": REDIS, "LOCATION": "http://x"},
        Error(
            "DISTLOCK['default']['LOCATION'] 'http://x' is not a Redis URL (scheme must be one of "
            "redis, rediss, unix).",
            hint="For example 'LOCATION': 'redis://127.0.0.1:6379/0' (or rediss://, unix://).",
            id="distlock.E005",
        ),
    ),
    (
        {"BACKEND": REDIS, "LOCATION": URL, "OPTIONS": {"socket_timeout": "1"}},
        Error(
            "DISTLOCK['default']['OPTIONS']['socket_timeout'] must be a finite number of seconds "
            "> 0, not '1'.",
            hint="For example 'socket_timeout': 2.",
            id="distlock.E006",
        ),
    ),
    (
        {"BACKEND": REDIS, "LOCATION": URL, "OPTIONS": {"NOT_AN_OPTION": 1}},
        Error(
            "DISTLOCK['default']['OPTIONS'] has options this backend does not know: NOT_AN_OPTION.",
            hint="RedisBackend understands CLUSTER, FAIR, MAX_RENEWALS, MAX_TTL, SENTINELS, "
            "SENTINEL_KWARGS, WAIT_REPLICAS, WAIT_TIMEOUT; lower-case options go to the Redis "
            "client.",
            id="distlock.E006",
        ),
    ),
    (
        {"BACKEND": REDIS, "LOCATION": URL, "OPTIONS": {"FAIR": "no"}},
        Error(
            "DISTLOCK['default']['OPTIONS']['FAIR'] must be True or False, not 'no'.",
            hint="True (the default): waiters are served first come, first served; False: a "
            "free lock goes to whoever asks first (more throughput, waiters may be overtaken).",
            id="distlock.E006",
        ),
    ),
    (
        {
            "BACKEND": "distlock.backends.redlock.RedlockBackend",
            "LOCATION": [URL, "redis://127.0.0.1:2/0", "redis://127.0.0.1:3/0"],
            "OPTIONS": {"FAIR": False},
        },
        Error(
            "DISTLOCK['default']['OPTIONS']['FAIR'] is False, but RedlockBackend has no "
            "non-fair mode: a free lock is granted by a majority of independent nodes, and a "
            "waiter woken without the grant it is handed would race every newcomer on each "
            "node, which can split the votes so that nobody gets a majority.",
            hint="Drop FAIR (its locks are fair), or use distlock.backends.redis.RedisBackend "
            "for non-fair locks.",
            id="distlock.E006",
        ),
    ),
    (
        {"BACKEND": REDIS, "LOCATION": URL, "TIMEOUT": -5},
        Error(
            "DISTLOCK['default']['TIMEOUT'] must be > 0 seconds, not -5.",
            hint="TIMEOUT is the default lease in seconds, e.g. 60.",
            id="distlock.E007",
        ),
    ),
    (
        {"BACKEND": REDIS, "LOCATION": URL, "KEY_PREFIX": "a{b}"},
        Error(
            "DISTLOCK['default']['KEY_PREFIX'] must be a non-empty string without braces, "
            "wildcards, spaces or control characters, not 'a{b}'.",
            hint="For example 'KEY_PREFIX': 'distlock' or 'myproject:locks'.",
            id="distlock.E008",
        ),
    ),
    (
        {"BACKEND": REDIS, "LOCATION": URL, "LOCATON": URL},
        Error(
            "DISTLOCK['default'] has unknown keys: LOCATON.",
            hint="Use only BACKEND, KEY_PREFIX, LOCATION, OPTIONS, TIMEOUT; check for typos.",
            id="distlock.E009",
        ),
    ),
]


@pytest.mark.parametrize(
    ("alias_setting", "expected"), EXACT_ERRORS, ids=[expected.id for _, expected in EXACT_ERRORS]
)
def test_each_error_is_exactly_this(alias_setting: dict[str, Any], expected: Error) -> None:
    assert check({"default": alias_setting}) == [expected]


def test_every_problem_is_reported_at_once() -> None:
    setting = {
        "BACKEND": REDIS,
        "LOCATON": URL,
        "TIMEOUT": -5,
        "OPTIONS": {"socket_timout": 1, "socket_connect_timeout": "2", "WAIT_REPLICAS": -1},
    }
    assert check({"default": setting}) == [
        Error(
            "DISTLOCK['default'] has unknown keys: LOCATON.",
            hint="Use only BACKEND, KEY_PREFIX, LOCATION, OPTIONS, TIMEOUT; check for typos.",
            id="distlock.E009",
        ),
        Error(
            "DISTLOCK['default']['TIMEOUT'] must be > 0 seconds, not -5.",
            hint="TIMEOUT is the default lease in seconds, e.g. 60.",
            id="distlock.E007",
        ),
        Error(
            "DISTLOCK['default']['LOCATION'] must be a Redis URL string, not None.",
            hint="For example 'LOCATION': 'redis://127.0.0.1:6379/0' (or rediss://, unix://).",
            id="distlock.E005",
        ),
        Error(
            "DISTLOCK['default']['OPTIONS']['socket_timout'] is not an option of the Redis client.",
            hint="Did you mean 'socket_timeout'?",
            id="distlock.E006",
        ),
        Error(
            "DISTLOCK['default']['OPTIONS']['socket_connect_timeout'] must be a finite number "
            "of seconds > 0, not '2'.",
            hint="For example 'socket_connect_timeout': 2.",
            id="distlock.E006",
        ),
        Error(
            "DISTLOCK['default']['OPTIONS']['WAIT_REPLICAS'] must be a whole number of "
            "replicas >= 0, not -1.",
            hint="For example 'WAIT_REPLICAS': 1 to confirm every acquire on one replica (0 "
            "turns it off).",
            id="distlock.E006",
        ),
    ]


def test_a_lock_on_settings_with_several_problems_names_them_all() -> None:
    import distlock

    bad = override_settings(
        DISTLOCK={
            "default": {
                "BACKEND": REDIS,
                "LOCATION": URL,
                "OPTIONS": {"socket_timout": 1, "pasword": "x"},
            }
        }
    )
    with bad, pytest.raises(InvalidLockBackendError, match=r"pasword.*and 1 more.*socket_timout"):
        distlock.lock("x").acquire()


REPLICATED_HINT = (
    "Set OPTIONS['WAIT_REPLICAS'] to the number of replicas of each master (e.g. 1) and "
    "OPTIONS['WAIT_TIMEOUT'] (ms), see docs/deployments.md; or add 'distlock.W002' to "
    "SILENCED_SYSTEM_CHECKS if losing locks at a failover is acceptable."
)


@pytest.mark.parametrize(
    ("options", "location", "deployment"),
    [
        ({"CLUSTER": True}, "redis://10.0.0.1:7000", "Redis Cluster"),
        ({"SENTINELS": [("10.0.0.1", 26379)]}, "redis://mymaster/0", "Redis Sentinel"),
    ],
)
def test_replicated_deployments_without_wait_replicas_are_w002(
    options: dict[str, Any], location: str, deployment: str
) -> None:
    setting = {"BACKEND": REDIS, "LOCATION": location, "OPTIONS": options}
    assert check({"default": setting, "other": setting}) == [
        Warning(
            f"DISTLOCK[{alias!r}] uses {deployment} without OPTIONS['WAIT_REPLICAS']: a lock "
            "is reported as acquired before any replica has it. Replication is asynchronous, "
            "so when a master fails over while its replicas lag, acknowledged locks are lost "
            "and a second client can take a lock its holder still works under.",
            hint=REPLICATED_HINT,
            id="distlock.W002",
        )
        for alias in ("default", "other")
    ]
    confirmed = {**options, "WAIT_REPLICAS": 1, "WAIT_TIMEOUT": 100}
    assert check({"default": {**setting, "OPTIONS": confirmed}}) == []


def test_one_server_and_redlock_are_not_w002() -> None:
    assert check({"default": {"BACKEND": REDIS, "LOCATION": URL}}) == []
    redlock = {
        "BACKEND": "distlock.backends.redlock.RedlockBackend",
        "LOCATION": [f"redis://10.0.0.{n}:6379/0" for n in (1, 2, 3)],
    }
    assert check({"default": redlock}) == []


def test_w002_can_be_silenced() -> None:
    from django.core.management import call_command

    setting = {"BACKEND": REDIS, "LOCATION": "redis://10.0.0.1:7000", "OPTIONS": {"CLUSTER": True}}
    with override_settings(DISTLOCK={"default": setting}, SILENCED_SYSTEM_CHECKS=["distlock.W002"]):
        call_command("check", "--fail-level", "WARNING")
