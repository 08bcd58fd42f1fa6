"""Settings for the distlock demo project.

Everything that differs between machines comes from environment variables, so that
``scripts/demo`` can point the project at a private redis-server:

``REDIS_URL``             Redis used for locks (db as given) and the cache (db 1). Default:
                          the Redis of a running ``scripts/demo`` (which writes its URL to
                          ``.demo-redis-url`` at the top of the clone, or to the file
                          ``DEMO_REDIS_URL_FILE`` names), else ``redis://127.0.0.1:6379/0``.
``DJANGO_SECRET_KEY``     defaults to a development-only key.
``DJANGO_DEBUG``          "1" (default) or "0".
``DJANGO_ALLOWED_HOSTS``  comma-separated, default ``localhost,127.0.0.1``.
``DJANGO_DB_PATH``        SQLite file, default ``testproject/db.sqlite3``.
``DISTLOCK_BACKEND``      dotted path of the lock backend.
``DISTLOCK_KEY_PREFIX``   prefix of every lock key, default ``distlock-demo``.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

BASE_DIR = Path(__file__).resolve().parent.parent
PROJECT_DIR = Path(__file__).resolve().parent


def _env_bool(name: str, default: str) -> bool:
    return os.environ.get(name, default).strip().lower() in {"1", "true", "yes", "on"}


def _with_db(url: str, db: int) -> str:
    """The same Redis server as ``url``, database ``db`` (for redis:// and rediss:// URLs)."""
    parts = urlsplit(url)
    if parts.scheme not in {"redis", "rediss"}:
        return url
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", parts.query, parts.fragment))


def _demo_redis_url() -> str | None:
    """The URL of the Redis that a running scripts/demo started, if one runs."""
    try:
        named = os.environ.get("DEMO_REDIS_URL_FILE") or BASE_DIR / ".demo-redis-url"
        return Path(named).read_text().strip() or None
    except FileNotFoundError:
        return None


REDIS_URL = os.environ.get("REDIS_URL") or _demo_redis_url() or "redis://127.0.0.1:6379/0"

SECRET_KEY = os.environ.get(
    "DJANGO_SECRET_KEY", "django-insecure-distlock-demo-key-for-development-only"
)
DEBUG = _env_bool("DJANGO_DEBUG", "1")
ALLOWED_HOSTS = [
    host.strip()
    for host in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1").split(",")
    if host.strip()
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "distlock",
    "testproject",  # its management commands (send_digest, the LockedCommandMixin demo)
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "testproject.urls"
WSGI_APPLICATION = "testproject.wsgi.application"
ASGI_APPLICATION = "testproject.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [PROJECT_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DJANGO_DB_PATH", str(PROJECT_DIR / "db.sqlite3")),
        # Each request in a transaction: @lock_view takes its lock before the transaction
        # begins and releases it after COMMIT (the Pay button, views.pay).
        "ATOMIC_REQUESTS": True,
        "OPTIONS": {"timeout": 20},
    }
}

CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": _with_db(REDIS_URL, 1),
        "OPTIONS": {"socket_timeout": 2, "socket_connect_timeout": 2},
    }
}

DISTLOCK = {
    "default": {
        "BACKEND": os.environ.get("DISTLOCK_BACKEND", "distlock.backends.redis.RedisBackend"),
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": os.environ.get("DISTLOCK_KEY_PREFIX", "distlock-demo"),
        "TIMEOUT": 60,
        "OPTIONS": {"socket_timeout": 2},
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "build" / "static"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"distlock": {"handlers": ["console"], "level": "INFO"}},
}
