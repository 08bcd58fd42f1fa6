"""The admin's "Held locks" page (registered on import, as ``admin.autodiscover()`` expects).

options  HeldLockAdmin: the list page and the audited force release
listing  the held locks of every alias, searched, sorted and paginated
display  how a hold is shown: time left, holder, release link
detail   one lock in full: its holder and its waiters, oldest first
semaphores  held semaphores on the same page, one row each
"""

from .display import format_remaining
from .options import HeldLockAdmin

__all__ = ["HeldLockAdmin", "format_remaining"]
