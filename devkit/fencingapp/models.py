"""The guarded resource of the fencing tests and the soak."""

from django.db import models


class Account(models.Model):
    """A balance that only the current lock holder may change: ``fence`` is the fencing token
    of the last accepted write (see distlock.fencing.fenced_update)."""

    balance = models.IntegerField(default=0)
    fence = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"account {self.pk}: {self.balance} (fence {self.fence})"


class FencedWrite(models.Model):
    """One accepted write, saved in the same transaction: the ids give the commit order."""

    token = models.BigIntegerField()
    writer = models.IntegerField()  # the writing process's pid
    kind = models.CharField(max_length=8)

    def __str__(self) -> str:
        return f"{self.kind} by {self.writer} under {self.token}"
