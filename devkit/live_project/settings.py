"""Settings of the tests-only live project: locks on the Redis named by DISTLOCK_TEST_URL.

Nothing but what the served views need: no sessions, no CSRF (the clients are test code), so
that a request costs the server as little as possible; and no database unless the test gives
it DATABASES in DISTLOCK_TEST_DATABASES (JSON: a real server's ``env()``,
devkit/databases.py).
"""

import os

from devkit.databases import databases_from_env

SECRET_KEY = "live-tests-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
INSTALLED_APPS = ["distlock"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "devkit.live_project.urls"
WSGI_APPLICATION = "devkit.live_project.wsgi.application"
DATABASES = databases_from_env()
DISTLOCK = {
    "default": {
        "BACKEND": "distlock.backends.redis.RedisBackend",
        "LOCATION": os.environ["DISTLOCK_TEST_URL"],
        "KEY_PREFIX": "live",
        "OPTIONS": {"socket_timeout": 2},
    }
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"distlock": {"handlers": ["console"], "level": "WARNING"}},
}
