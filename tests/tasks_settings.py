"""Settings for the processes of the django.tasks tests (Django >= 6.0): the test suite's,
plus django-tasks-db's database backend on an SQLite file that the enqueuing process and the
``db_worker`` processes share, and DISTLOCK from DISTLOCK_TEST_KIND / DISTLOCK_TEST_URL."""
import os

from tests.configs import distlock_settings
from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_db"]
DATABASES = {
    **DATABASES,
    "default": {"ENGINE": "django.db.backends.sqlite3",
                "NAME": os.environ["DISTLOCK_TEST_TASKS_DB"], "OPTIONS": {"timeout": 30}},
}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
DISTLOCK, CACHES = distlock_settings(os.environ["DISTLOCK_TEST_KIND"],
                                     os.environ["DISTLOCK_TEST_URL"])
