"""Settings of the shop served by gunicorn in tests/core/test_transactions_databases.py: the
database from DISTLOCK_TEST_DATABASES (devkit/databases.py), the locks on DISTLOCK_TEST_URL,
every request in a transaction (ATOMIC_REQUESTS)."""

import os

from devkit.databases import databases_from_env

SECRET_KEY = "shop-tests-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
INSTALLED_APPS = ["distlock", "devkit.shop"]
MIDDLEWARE = ["devkit.shop.views.contention"]
if os.environ.get("SHOP_DJANGO_MIDDLEWARE") == "1":
    # Django's own middleware only, each both sync and async, as a new project's: under ASGI
    # the view's thread then runs under no async_to_sync call of the handler's (the
    # contention middleware, sync only, puts one around it). No X-Waited header.
    MIDDLEWARE = [
        "django.middleware.security.SecurityMiddleware",
        "django.middleware.common.CommonMiddleware",
        "django.middleware.clickjacking.XFrameOptionsMiddleware",
    ]
ROOT_URLCONF = "devkit.shop.urls"
WSGI_APPLICATION = "devkit.shop.wsgi.application"
DATABASES = databases_from_env() or {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
}
# SHOP_ISOLATION: the isolation level of every connection (devkit.shop.isolation);
# "server default": none set (MariaDB: OPTIONS["isolation_level"] None, InnoDB's own level).
_ISOLATION = os.environ.get("SHOP_ISOLATION")
_PSYCOPG_LEVELS = {"read committed": 2, "repeatable read": 3, "serializable": 4}
for _database in DATABASES.values():
    _database["ATOMIC_REQUESTS"] = True
    # A commit as slow as one that waits for a disk (devkit/shop/slow_commit).
    _database["ENGINE"] = _database["ENGINE"].replace(
        "django.db.backends.", "devkit.shop.slow_commit."
    )
    if _ISOLATION == "server default":
        if "mysql" in _database["ENGINE"]:
            _database.setdefault("OPTIONS", {})["isolation_level"] = None
    elif _ISOLATION and "postgresql" in _database["ENGINE"]:
        _database.setdefault("OPTIONS", {})["isolation_level"] = _PSYCOPG_LEVELS[_ISOLATION]
    elif _ISOLATION and "mysql" in _database["ENGINE"]:
        _database.setdefault("OPTIONS", {})["isolation_level"] = _ISOLATION
DISTLOCK = {
    "default": {
        "BACKEND": "distlock.backends.redis.RedisBackend",
        "LOCATION": os.environ.get("DISTLOCK_TEST_URL", "redis://127.0.0.1:1/0"),
        "KEY_PREFIX": "shop",
        "OPTIONS": {"socket_timeout": 5},
    }
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"distlock": {"handlers": ["console"], "level": "WARNING"}},
}
