"""RedisBackend's settings: LOCATION and OPTIONS parsed and checked, nothing connected.

Every check notes its problem and goes on, so `manage.py check` names all of them at once.
"""

from __future__ import annotations

import difflib
import inspect
import math
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
import redis.cluster

from ..exceptions import InvalidLockBackendError
from .settings import Problems

SCHEMES = ("redis", "rediss", "unix")
# The path of a redis:// or rediss:// URL names the database: redis-py silently ignores one
# that is not a number and uses database 0, so distlock refuses it.
_DB_PATH = re.compile(r"/?\d*")
_UNSAFE_IN_URL = re.compile(r"[\s\x00-\x1f\x7f]")
# Applied unless OPTIONS say otherwise: fail within seconds.
CLIENT_DEFAULTS: dict[str, Any] = {"socket_timeout": 2.0, "socket_connect_timeout": 2.0}
# How long WAIT waits for replicas by default (ms), at most half the socket timeout.
DEFAULT_WAIT_TIMEOUT_MS = 500
# What OPTIONS are distlock's own on a RedisBackend (upper case).
OWN_OPTIONS = frozenset(
    {"CLUSTER", "SENTINELS", "SENTINEL_KWARGS", "WAIT_REPLICAS", "WAIT_TIMEOUT"}
)


def _parameters(*callables: Any) -> frozenset[str]:
    return frozenset(
        name
        for function in callables
        for name in inspect.signature(function).parameters
        if name not in ("self", "args", "kwargs")
    )


# Keyword arguments a client, its pool or its connections take: an OPTION not among them is
# a typo, reported by name (with the nearest known one) rather than as the first TypeError.
CLIENT_ARGUMENTS = _parameters(
    redis.Redis.__init__,
    redis.ConnectionPool.__init__,
    redis.BlockingConnectionPool.__init__,
    redis.Connection.__init__,
    redis.SSLConnection.__init__,
    redis.UnixDomainSocketConnection.__init__,
)
# Keyword arguments only a RedisCluster takes (read_from_replicas, require_full_coverage...).
CLUSTER_ARGUMENTS = _parameters(redis.cluster.RedisCluster.__init__) - CLIENT_ARGUMENTS


@dataclass
class RedisSettings:
    """What a RedisBackend was configured with."""

    location: str = "redis://127.0.0.1:6379/0"
    cluster: bool = False
    sentinels: list[tuple[str, int]] | None = None
    sentinel_kwargs: dict[str, Any] | None = None
    client_options: dict[str, Any] = field(default_factory=lambda: dict(CLIENT_DEFAULTS))
    wait_replicas: int = 0
    wait_timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS

    @property
    def service_name(self) -> str:
        return service_name(self.location)

    @property
    def address(self) -> str:
        """The server's address for messages: never the password."""
        if self.sentinels:
            sentinels = ", ".join(f"{host}:{port}" for host, port in self.sentinels)
            return f"service {self.service_name!r} of Sentinels {sentinels}"
        if self.cluster:
            return f"the Redis Cluster of {redact(self.location)}"
        return redact(self.location)


def parse_settings(
    alias: str, location: object, options: dict[str, Any], problems: Problems
) -> RedisSettings:
    """Return the settings of ``alias``; note in ``problems`` everything that is wrong."""
    parsed = RedisSettings()

    def error(message: str, hint: str) -> InvalidLockBackendError:
        return InvalidLockBackendError(
            f"DISTLOCK[{alias!r}]['OPTIONS']{message}", check_id="distlock.E006", hint=hint
        )

    parsed.cluster = problems.parse(lambda: _parse_cluster(options, error), False)
    parsed.sentinels = problems.parse(lambda: _parse_sentinels(options, error), None)
    parsed.sentinel_kwargs = options.get("SENTINEL_KWARGS")
    parsed.location = problems.parse(
        lambda: _parse_location(alias, location, parsed), parsed.location
    )
    parsed.client_options = problems.parse(
        lambda: _parse_client_options(options, parsed, error), parsed.client_options
    )
    parsed.wait_replicas, parsed.wait_timeout_ms = problems.parse(
        lambda: _parse_wait(options, parsed.client_options, error), (0, DEFAULT_WAIT_TIMEOUT_MS)
    )
    return parsed


def _parse_cluster(options: dict[str, Any], error: Any) -> bool:
    cluster = options.get("CLUSTER", False)
    if not isinstance(cluster, bool):
        raise error(
            f"['CLUSTER'] must be True or False, not {cluster!r}.",
            "Set 'CLUSTER': True when LOCATION names a node of a Redis Cluster.",
        )
    if cluster and "SENTINELS" in options:
        raise error(
            " sets both CLUSTER and SENTINELS.",
            "A Redis Cluster fails over by itself: use CLUSTER or SENTINELS, not both.",
        )
    return cluster


def _parse_sentinels(options: dict[str, Any], error: Any) -> list[tuple[str, int]] | None:
    sentinels = options.get("SENTINELS")
    if sentinels is None:
        if "SENTINEL_KWARGS" in options:
            raise error(
                " sets SENTINEL_KWARGS without SENTINELS.",
                "Add 'SENTINELS': [('sentinel-host', 26379), ...] or drop SENTINEL_KWARGS.",
            )
        return None
    hint = "For example 'SENTINELS': [('10.0.0.1', 26379), ('10.0.0.2', 26379)]."
    if not isinstance(sentinels, (list, tuple)) or not sentinels:
        raise error(
            f"['SENTINELS'] must be a non-empty list of (host, port), not {sentinels!r}.", hint
        )
    parsed = []
    for address in sentinels:
        if not (
            isinstance(address, (list, tuple))
            and len(address) == 2
            and isinstance(address[0], str)
            and address[0]
            and isinstance(address[1], int)
            and not isinstance(address[1], bool)
            and 0 < address[1] < 65536
        ):
            raise error(f"['SENTINELS'] has {address!r}, which is not a (host, port) pair.", hint)
        parsed.append((address[0], address[1]))
    sentinel_kwargs = options.get("SENTINEL_KWARGS", {})
    if not isinstance(sentinel_kwargs, dict):
        raise error(
            f"['SENTINEL_KWARGS'] must be a dict, not {sentinel_kwargs!r}.",
            "For example 'SENTINEL_KWARGS': {'password': '...'} (the sentinels' own "
            "password; by default they get the socket timeouts of OPTIONS).",
        )
    return parsed


def _parse_location(alias: str, location: object, parsed: RedisSettings) -> str:
    hint = "For example 'LOCATION': 'redis://127.0.0.1:6379/0' (or rediss://, unix://)."
    if parsed.sentinels:
        hint = "With SENTINELS, LOCATION is 'redis://SERVICE_NAME/DB', e.g. 'redis://mymaster/0'."
    elif parsed.cluster:
        hint = "With CLUSTER, LOCATION names any node, e.g. 'redis://10.0.0.1:7000'."

    def invalid(why: str) -> InvalidLockBackendError:
        shown = redact(location) if isinstance(location, str) else location
        return InvalidLockBackendError(
            f"DISTLOCK[{alias!r}]['LOCATION'] {shown!r} {why}.",
            check_id="distlock.E005",
            hint=hint,
        )

    if not isinstance(location, str) or not location:
        raise InvalidLockBackendError(
            f"DISTLOCK[{alias!r}]['LOCATION'] must be a Redis URL string, not {location!r}.",
            check_id="distlock.E005",
            hint=hint,
        )
    if _UNSAFE_IN_URL.search(location):
        # urlsplit strips these, redis-py does not: the check passed, the client failed.
        raise invalid("contains spaces or control characters")
    parts = urlsplit(location)
    if parts.scheme not in SCHEMES or not (parts.netloc or parts.path):
        raise invalid(f"is not a Redis URL (scheme must be one of {', '.join(SCHEMES)})")
    try:
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise invalid("has an invalid port") from None
    database = parts.path.strip("/")
    if (parsed.sentinels or parsed.cluster) and parts.scheme == "unix":
        raise invalid("is a unix socket, which Sentinel and Cluster cannot use")
    valid_database = database.isdigit() or not database
    if parsed.sentinels and not (service_name(location) and valid_database):
        raise invalid("does not name a Sentinel service and database")
    if parsed.cluster and database not in ("", "0"):
        raise invalid("selects a database, but a Redis Cluster only has database 0")
    if parts.scheme != "unix" and not parsed.sentinels and not _DB_PATH.fullmatch(parts.path):
        raise invalid(f"names the database {database!r}; Redis databases are numbers")
    return location


def _parse_client_options(
    options: dict[str, Any], parsed: RedisSettings, error: Any
) -> dict[str, Any]:
    client_options = {k: v for k, v in options.items() if not k.isupper()}
    known = CLIENT_ARGUMENTS | (CLUSTER_ARGUMENTS if parsed.cluster else frozenset())
    found = Problems()
    for name in sorted(set(client_options) - known):
        near = difflib.get_close_matches(name, known, n=1)
        found.add(
            error(
                f"[{name!r}] is not an option of the Redis client.",
                f"Did you mean {near[0]!r}?"
                if near
                else "Lower-case OPTIONS are redis-py client arguments (password, socket_timeout, "
                "ssl_ca_certs, ...); upper-case ones are distlock's own.",
            )
        )
    for name in ("socket_timeout", "socket_connect_timeout"):
        value = client_options.get(name, CLIENT_DEFAULTS[name])
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value <= 0
        ):
            found.add(
                error(
                    f"[{name!r}] must be a finite number of seconds > 0, not {value!r}.",
                    f"For example '{name}': 2.",
                )
            )
    found.raise_any()
    merged = {**CLIENT_DEFAULTS, **client_options}
    try:
        # Building a client and a connection connects to nothing, but rejects bad values now,
        # at `manage.py check`, rather than at the first lock. A RedisCluster would connect
        # as it is built, so its node connections are checked on a plain client instead.
        node_options = {k: v for k, v in merged.items() if k not in CLUSTER_ARGUMENTS}
        location = parsed.location if not parsed.sentinels else "redis://localhost/0"
        client = redis.Redis.from_url(location, **node_options)
        client.connection_pool.make_connection()
        client.close()
    except (TypeError, ValueError) as exc:
        raise error(
            f" are not valid for the Redis client: {exc}",
            "Lower-case OPTIONS are redis-py client arguments (password, "
            "socket_timeout, ssl_ca_certs, ...).",
        ) from None
    return merged


def _parse_wait(
    options: dict[str, Any], client_options: dict[str, Any], error: Any
) -> tuple[int, int]:
    replicas = options.get("WAIT_REPLICAS", 0)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise error(
            f"['WAIT_REPLICAS'] must be a whole number of replicas >= 0, not {replicas!r}.",
            "For example 'WAIT_REPLICAS': 1 to confirm every acquire on one replica "
            "(0 turns it off).",
        )
    socket_timeout = client_options.get("socket_timeout")
    ceiling = round(socket_timeout * 1000) if socket_timeout else None
    default = (
        DEFAULT_WAIT_TIMEOUT_MS if ceiling is None else min(DEFAULT_WAIT_TIMEOUT_MS, ceiling // 2)
    )
    timeout = options.get("WAIT_TIMEOUT", default)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int)
        or timeout <= 0
        or (ceiling is not None and timeout >= ceiling)
    ):
        bound = f" and below socket_timeout ({ceiling} ms)" if ceiling else ""
        raise error(
            f"['WAIT_TIMEOUT'] must be a whole number of milliseconds > 0{bound}, not {timeout!r}.",
            "For example 'WAIT_TIMEOUT': 100: how long an acquire waits for replicas "
            "before it fails closed.",
        )
    if "WAIT_TIMEOUT" in options and not replicas:
        raise error(
            " sets WAIT_TIMEOUT without WAIT_REPLICAS.",
            "Add 'WAIT_REPLICAS': 1 (or more), or drop WAIT_TIMEOUT.",
        )
    return replicas, timeout


def service_name(location: str) -> str:
    """Return the Sentinel service named by ``redis://[[user]:password@]SERVICE/DB``."""
    return unquote(urlsplit(location).netloc.rsplit("@", 1)[-1])


def redact(url: str) -> str:
    """Return ``url`` with any password replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return parts._replace(netloc=user + netloc).geturl()
