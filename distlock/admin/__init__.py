"""The admin's "Held locks" page (registered on import, as ``admin.autodiscover()`` expects).

    options  HeldLockAdmin: the list page and the audited force release
    listing  the held locks of every alias, searched, sorted and paginated
    semaphores  held semaphores on the same page, and freeing one permit
"""
from .options import HeldLockAdmin, format_remaining

__all__ = ["HeldLockAdmin", "format_remaining"]
