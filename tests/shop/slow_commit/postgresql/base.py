from django.db.backends.postgresql import base

from tests.shop.slow_commit import slowed

DatabaseWrapper = slowed(base.DatabaseWrapper)
