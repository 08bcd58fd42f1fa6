"""Settings of the ``manage.py`` processes of tests/commands/test_operator_outage.py: the test
settings with two aliases, "default" on $DISTLOCK_TEST_URL and "down" on $DISTLOCK_TEST_DOWN_URL."""

import os

from devkit.configs import with_alias_down
from devkit.settings import *  # noqa: F403

DISTLOCK, CACHES = with_alias_down(
    os.environ["DISTLOCK_TEST_URL"], os.environ["DISTLOCK_TEST_DOWN_URL"]
)
