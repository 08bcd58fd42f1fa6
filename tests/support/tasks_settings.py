"""Settings for the processes of the django.tasks tests (Django >= 6.0): tests.support.env_settings,
plus django-tasks-db's database backend on an SQLite file that the enqueuing process and the
``db_worker`` processes share."""

import os

from devkit.settings import DATABASES, INSTALLED_APPS
from tests.support.env_settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_db"]
DATABASES = {
    **DATABASES,
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["DISTLOCK_TEST_TASKS_DB"],
        "OPTIONS": {"timeout": 30},
    },
}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
