"""The admin's "Held locks" page (registered on import, as ``admin.autodiscover()`` expects).

    options  HeldLockAdmin: the list page and the audited force release
    listing  the held locks of every alias, searched, sorted and paginated
"""
from .options import HeldLockAdmin, format_remaining

__all__ = ["HeldLockAdmin", "format_remaining"]
