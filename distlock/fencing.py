"""Fencing tokens checked where it matters: in the database write itself.

A lease cannot promise that its holder is still running inside it: a holder paused past its
lease (GC, swapping, a stopped VM) wakes up and writes after the next holder did. A fencing
token only helps if the resource checks it. ``fenced_update`` makes a Django model write
conditional on it, in one ``UPDATE``::

    class Account(models.Model):
        balance = models.IntegerField()
        fence = models.BigIntegerField(default=0)  # the token of the last accepted write

    with distlock.lock(f"account:{pk}", ttl=30) as lk:
        fenced_update(Account.objects.filter(pk=pk), lk.fencing_token,
                      balance=F("balance") - 10, strict=True)

runs ``UPDATE ... SET balance = balance - 10, fence = <token> WHERE id = <pk> AND fence <=
<token>``: a row already written under a newer token is left alone. Equal tokens pass, so one
holder may write several times.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.core.exceptions import FieldDoesNotExist
from django.db import models

from .claims import claim_now
from .exceptions import FencedUpdateRejected

if TYPE_CHECKING:
    from .lock import Lock

__all__ = ["FencedUpdateRejected", "afenced_update", "claim", "fenced_update"]


def claim(lock: Lock, *, using: str = "default") -> None:
    """Claim the fencing token of ``lock`` (held with ``fence=True``) in the running
    ``transaction.atomic()`` block on ``using``, now, unless it was claimed in that
    transaction already; raise FencedUpdateRejected (the transaction then rolls back) if a
    newer token was claimed.

    ``fence=True`` claims before each statement Django runs through its cursors' ``execute``.
    Work that reaches the database past them is not claimed on its own: a stored procedure
    through ``cursor.callproc()``, psycopg's ``cursor.copy()``, the raw driver connection.
    Call ``claim(lock)`` first, in the same atomic block (docs/fencing-and-limits.md)::

        with distlock.lock("import", fence=True) as lk, transaction.atomic():
            claim(lk)
            with connection.cursor() as cursor, cursor.copy("COPY ... FROM STDIN") as rows:
                ...
    """
    claim_now(lock, using)


def fenced_update(
    queryset: models.QuerySet[Any],
    token: int,
    *,
    field: str = "fence",
    strict: bool = False,
    **values: Any,
) -> int:
    """Update the rows of ``queryset`` with ``values`` and set ``field`` to ``token``, only
    where ``field`` <= ``token``; return how many rows were updated.

    With ``strict=True``, raise FencedUpdateRejected when no row was updated although the
    queryset matches rows: they were written under a newer token, so this holder's lease has
    ended. Without ``values`` the update only claims the rows for ``token`` (read them after
    a claim, and no older holder can write them any more).
    """
    fenced = _fenced(queryset, token, field, strict, values)
    updated = fenced.update(**{field: token}, **values)
    if strict and updated == 0:
        newest = queryset.aggregate(newest=models.Max(field))["newest"]
        if newest is not None and newest > token:
            raise _rejected(queryset, token, newest)
    return updated


async def afenced_update(
    queryset: models.QuerySet[Any],
    token: int,
    *,
    field: str = "fence",
    strict: bool = False,
    **values: Any,
) -> int:
    """The async form of :func:`fenced_update`, with the same arguments and result."""
    # Django's async QuerySet methods (aupdate, aaggregate) are the sync ones run through
    # sync_to_async: running the whole fenced update there is the same policy, and makes the
    # update and the check behind strict=True one trip to the database thread, not two.
    update = sync_to_async(fenced_update)
    return await update(queryset, token, field=field, strict=strict, **values)


def _fenced(
    queryset: Any, token: object, field: str, strict: object, values: dict[str, Any]
) -> models.QuerySet[Any]:
    """Check the arguments; return the queryset narrowed to rows the token may write."""
    if not isinstance(queryset, models.QuerySet):
        raise TypeError(
            f"fenced_update() needs a QuerySet (e.g. Model.objects.filter(pk=pk)), not "
            f"{type(queryset).__name__}."
        )
    if isinstance(token, bool) or not isinstance(token, int):
        raise TypeError(
            f"token must be a lock's fencing_token (int), not {type(token).__name__}"
            f"{' (the lock is not held)' if token is None else ''}."
        )
    if token <= 0:
        raise ValueError(f"token must be a lock's fencing_token (> 0), not {token}.")
    if not isinstance(strict, bool):
        raise TypeError(f"strict must be True or False, not {strict!r}.")
    if field in values:
        raise ValueError(f"{field!r} is the fence field: fenced_update() sets it to the token.")
    _check_fence_field(queryset.model, field)
    return queryset.filter(**{f"{field}__lte": token})


def _check_fence_field(model: type[models.Model], field: str) -> None:
    hint = (
        f"Add `{field} = models.BigIntegerField(default=0)` to {model.__name__} (and a "
        "migration), or pass field= the name of such a field."
    )
    try:
        found = model._meta.get_field(field)
    except FieldDoesNotExist:
        raise ValueError(
            f"{model.__name__} has no field {field!r} to hold fencing tokens. {hint}"
        ) from None
    # Tokens are microseconds since 1970 (about 2**51): a 32-bit integer column overflows.
    if not isinstance(found, models.BigIntegerField) or found.null:
        raise ValueError(
            f"{model.__name__}.{field} must be a BigIntegerField that is not "
            f"nullable (NULL never compares <= a token). {hint}"
        )


def _rejected(queryset: Any, token: int, newest: int) -> FencedUpdateRejected:
    return FencedUpdateRejected(
        f"Write to {queryset.model._meta.label} rejected: it carries fencing token {token}, "
        f"but the rows were already written under the newer token {newest}. This holder's "
        "lease ended and someone else holds the lock: do not apply this work.",
        token=token,
        newest=newest,
    )
