from django.db.backends.postgresql import base

from devkit.shop.slow_commit import slowed

DatabaseWrapper = slowed(base.DatabaseWrapper)
