"""HeldLock: the admin's handle on locks, which live in Redis, never in the database."""

from django.db import models

from .claims import TABLE


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


class Fence(models.Model):
    """The newest fencing token claimed for one lock name (``fence=True``, docs/fencing-and-
    limits.md): a holder claims its token here in each of its database transactions, and one
    whose token is older than the stored one is refused (distlock.claims)."""

    # sha256 of the DISTLOCK alias and the lock name, in hex: names are up to 1,024
    # characters, too long for a key MariaDB can index in utf8mb4.
    digest = models.CharField(max_length=64, primary_key=True)
    name = models.TextField()  # the lock's name, for whoever reads the table
    token = models.BigIntegerField()  # tokens are microseconds since 1970: 64-bit
    # How many claims were accepted: each changes the row, which is how MariaDB's affected
    # rows tell an accepted claim from a refused one in one statement.
    claims = models.BigIntegerField(default=1)

    class Meta:
        db_table = TABLE
        default_permissions = ()
        verbose_name = "fence"
        verbose_name_plural = "fences"

    def __str__(self) -> str:
        return f"{self.name}: {self.token}"
