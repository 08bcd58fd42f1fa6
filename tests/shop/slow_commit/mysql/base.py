from django.db.backends.mysql import base

from tests.shop.slow_commit import slowed

DatabaseWrapper = slowed(base.DatabaseWrapper)
