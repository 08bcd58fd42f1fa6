"""Django settings for the test suite. Lock servers are started by fixtures (conftest.py),
which point DISTLOCK at them; nothing here depends on a Redis already running."""

import os
import tempfile
from typing import Any

import django

FENCING_DB = os.environ.get("DISTLOCK_FENCING_DB") or os.path.join(
    tempfile.gettempdir(), f"distlock-fencing-{os.getpid()}.sqlite3"
)
SECRET_KEY = "tests-only-not-secret"
# The admin tests make and log in a user per test; the default hasher (PBKDF2, over a million
# rounds) is meant to be slow, which no test needs (Django's docs on speeding up tests).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
DEBUG = True
USE_TZ = True
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "distlock",
    "devkit.fencingapp",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "devkit.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
# Annotated: mypy (checking this file when the package is not the installed copy) would infer
# dict[str, object] for the aliases and refuse the OPTIONS assignment below.
DATABASES: dict[str, dict[str, Any]] = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
    # A file, so that worker processes share it (tests/faults): one per test run. It depends
    # on no other database: Django's default for a second alias is to be created after
    # "default", and a test that asks for "fencing" alone (databases=["fencing"]) would then
    # fail at setup with "Circular dependency in TEST[DEPENDENCIES]".
    "fencing": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": FENCING_DB,
        "TEST": {"NAME": FENCING_DB, "DEPENDENCIES": []},
        "OPTIONS": {"timeout": 30},
    },
}
if django.VERSION >= (5, 1):
    # Writers take the lock at BEGIN instead of failing to upgrade it (Django 5.1+ only).
    DATABASES["fencing"]["OPTIONS"]["transaction_mode"] = "IMMEDIATE"
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
# A placeholder the fixtures replace; the in-process backend keeps import-time code working.
DISTLOCK = {"default": {"BACKEND": "distlock.backends.locmem.LocMemBackend"}}
