from django.db.backends.mysql import base

from devkit.shop.slow_commit import slowed

DatabaseWrapper = slowed(base.DatabaseWrapper)
