"""The test suite's settings with DISTLOCK (and CACHES) from the environment, for processes
the tests start with ``python -m django ...``: DISTLOCK_TEST_KIND and DISTLOCK_TEST_URL, as
tests.workers reads them (tests.configs)."""
import os

from tests.configs import distlock_settings
from tests.settings import *  # noqa: F403

DISTLOCK, CACHES = distlock_settings(os.environ["DISTLOCK_TEST_KIND"],
                                     os.environ["DISTLOCK_TEST_URL"])
