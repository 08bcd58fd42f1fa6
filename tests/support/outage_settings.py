"""Settings of the ``manage.py`` processes of tests/commands/test_operator_outage.py: the test
settings with two aliases, "default" on $DISTLOCK_TEST_URL and "down" on $DISTLOCK_TEST_DOWN_URL."""

import os

from tests.support.configs import with_alias_down
from tests.support.settings import *  # noqa: F403

DISTLOCK, CACHES = with_alias_down(
    os.environ["DISTLOCK_TEST_URL"], os.environ["DISTLOCK_TEST_DOWN_URL"]
)
