"""distlock: correct, fast distributed locks on Redis for Django.

import distlock

with distlock.lock("reports:daily", ttl=60, wait=5) as lk:
    ...
"""

# The exceptions, re-exported as distlock.<Name>. lock.py imports the ones it raises under the
# same names, so the two import lists overlap (`duplicates` pairs them): names, not logic.
from .exceptions import (
    BackendUnavailable,
    FencedUpdateRejected,
    InvalidLockBackendError,
    InvalidLockName,
    IsolationLevelWarning,
    LockError,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    RenewalLimitReached,
    SemaphoresNotSupported,
    SharedLocksNotSupported,
    SharedLockUpgrade,
)
from .handler import locks
from .info import LockInfo, SemaphoreInfo, WaiterInfo
from .leader import Leader, leader
from .lock import Lock, lock
from .semaphore import Semaphore, semaphore
from .views import lock_view

__all__ = [
    "BackendUnavailable",
    "FencedUpdateRejected",
    "InvalidLockBackendError",
    "InvalidLockName",
    "IsolationLevelWarning",
    "Leader",
    "Lock",
    "LockError",
    "LockInfo",
    "LockLost",
    "LockNotAcquired",
    "LockNotOwned",
    "RenewalLimitReached",
    "Semaphore",
    "SemaphoreInfo",
    "SemaphoresNotSupported",
    "SharedLockUpgrade",
    "SharedLocksNotSupported",
    "WaiterInfo",
    "leader",
    "lock",
    "lock_view",
    "locks",
    "semaphore",
]
__version__ = "0.1.0"
