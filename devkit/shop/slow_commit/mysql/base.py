from django.db.backends.mysql import base

from tests.support.shop.slow_commit import slowed

DatabaseWrapper = slowed(base.DatabaseWrapper)
