from django.db.backends.sqlite3 import base

from tests.support.shop.slow_commit import slowed

DatabaseWrapper = slowed(base.DatabaseWrapper)
