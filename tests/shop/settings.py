"""Settings of the shop served by gunicorn in tests/test_transactions_databases.py: the
database from DISTLOCK_TEST_DATABASES (tests/databases.py), the locks on DISTLOCK_TEST_URL,
every request in a transaction (ATOMIC_REQUESTS)."""
import json
import os

SECRET_KEY = "shop-tests-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
INSTALLED_APPS = ["distlock", "tests.shop"]
MIDDLEWARE = ["tests.shop.views.contention"]
ROOT_URLCONF = "tests.shop.urls"
WSGI_APPLICATION = "tests.shop.wsgi.application"
DATABASES = json.loads(os.environ.get("DISTLOCK_TEST_DATABASES") or "{}") or {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
}
for _database in DATABASES.values():
    _database["ATOMIC_REQUESTS"] = True
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
