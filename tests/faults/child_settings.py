"""Django settings of the processes the zygote forks: the test settings, with a SQLite file
(the guarded resource) as the default database. tests.faults.roles.configure() names the
file and points DISTLOCK at the test's Redis in each child."""

from devkit.settings import *  # noqa: F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": ":memory:",  # replaced by roles.configure()
        # Writers wait for each other (a paused one may hold SQLite's write lock for a while)
        # and take the write lock when their transaction begins.
        "OPTIONS": {"timeout": 60, "transaction_mode": "IMMEDIATE"},
    }
}
