"""HeldLock: the admin's handle on locks, which live in Redis, never in the database."""

from django.db import models


class HeldLock(models.Model):
    """A lock held right now. Unmanaged: no table; it exists for the admin's page, its
    permissions and its LogEntry records (see distlock.admin)."""

    # A TextField: names are up to 1,024 characters, and a CharField that long as a primary
    # key makes Django warn on MySQL and MariaDB (mysql.W003), though no table exists.
    name = models.TextField(primary_key=True)

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("view_heldlock", "Can view held locks"),
            ("release_heldlock", "Can force release held locks"),
        ]
        verbose_name = "held lock"
        verbose_name_plural = "held locks"

    def __str__(self) -> str:
        return self.name
