from django.db.backends.sqlite3 import base

from devkit.shop.slow_commit import slowed

DatabaseWrapper = slowed(base.DatabaseWrapper)
