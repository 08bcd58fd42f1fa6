"""The test suite's settings with DISTLOCK (and CACHES) from the environment, for processes
the tests start with ``python -m django ...``: DISTLOCK_TEST_KIND and DISTLOCK_TEST_URL, as
tests.support.workers reads them (devkit.configs); and, when DISTLOCK_TEST_DATABASES is
set (a real server's ``env()``, devkit/databases.py), its aliases added to DATABASES
("default" replaced)."""

import os

from devkit.configs import distlock_settings
from devkit.databases import databases_from_env
from devkit.settings import *  # noqa: F403
from devkit.settings import DATABASES

DISTLOCK, CACHES = distlock_settings(
    os.environ["DISTLOCK_TEST_KIND"], os.environ["DISTLOCK_TEST_URL"]
)
DATABASES = {**DATABASES, **databases_from_env()}
