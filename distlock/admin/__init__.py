"""The admin's "Held locks" page (registered on import, as ``admin.autodiscover()`` expects).

options  HeldLockAdmin: the list page and the audited force release
listing  the held locks of every alias, searched, sorted and paginated
display  how a hold is shown: time left, holder, release link
detail   one lock of any kind in full: its holders (or permits) and its waiters, oldest first
semaphores  held semaphores on the same page, one row each
shared   locks held shared on the same page, one row each
breadcrumbs  the breadcrumbs of the pages below the list, in each Django's markup
"""

from .display import format_remaining
from .options import HeldLockAdmin

__all__ = ["HeldLockAdmin", "format_remaining"]
