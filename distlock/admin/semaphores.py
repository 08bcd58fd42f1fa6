"""Semaphores on the admin's "Held locks" page: one row per semaphore with its holders, and
freeing one permit (audited, CSRF-protected POST after a confirmation, like a lock's force
release).

A permit is named by alias, semaphore name and permit number (its ``fencing_token``); the
holder's token never leaves the server. distlock.admin.options calls in here from three
places: the list (``semaphore_rows``), its URLs and ``release_permit``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse

from ..exceptions import SemaphoresNotSupported
from ..handler import locks
from ..info import LockInfo, SemaphoreInfo
from ..models import HeldLock
from ..semaphore import semaphore_backend
from .listing import ALIAS_ERRORS


@dataclass(frozen=True)
class PermitRow:
    info: LockInfo
    holder: str
    expires_in: str
    release_url: str


@dataclass(frozen=True)
class SemaphoreRow:
    info: SemaphoreInfo
    permits: list[PermitRow]


def semaphore_rows(aliases: list[str], prefix: str, release_base: str, filters: str,
                   unavailable: dict[str, str]) -> list[SemaphoreRow]:
    """Return a row for every held semaphore of ``aliases`` whose name starts with
    ``prefix``; an alias that cannot be read is added to ``unavailable``."""
    from .options import FILTERS, describe_holder, format_remaining  # (it imports this module)

    rows = []
    for alias in aliases:
        try:
            backend = locks[alias]
            held = backend.held_semaphores(prefix) if hasattr(backend, "held_semaphores") else []
        except ALIAS_ERRORS as exc:
            unavailable[alias] = str(exc)
            continue
        for info in held:
            permits = [PermitRow(
                info=holder, holder=describe_holder(holder),
                expires_in=format_remaining(holder.ttl_remaining),
                release_url=f"{release_base}?" + urlencode({
                    "alias": alias, "name": info.name, "fencing_token": holder.fencing_token,
                    FILTERS: filters}),
            ) for holder in info.holders]
            rows.append(SemaphoreRow(info, permits))
    return rows


def release_permit(model_admin: Any, request: HttpRequest) -> HttpResponse:
    """GET: confirm which permit will be freed. POST: free it, if that holder still has it."""
    from .options import FILTERS, describe_holder, format_remaining, list_filters

    asked = model_admin.release_request(request)
    if isinstance(asked, HttpResponse):
        return asked
    form, alias, name, number, back = asked
    gone = (f"No permit of the semaphore “{name}” (alias {alias}) is held with number {number} "
            "any more: it was released or expired. Nothing was freed.")
    try:
        backend = semaphore_backend(alias)
        info = backend.semaphore_info(name)
        holders = info.holders if info is not None else ()
        holder = next((h for h in holders if h.fencing_token == number), None)
        if holder is None:
            messages.warning(request, gone)
            return HttpResponseRedirect(back)
        if request.method != "POST":
            context = {
                **model_admin.admin_site.each_context(request),
                "title": "Free a permit of a semaphore", "opts": model_admin.opts,
                "lock": holder, "permit": True, "holder": describe_holder(holder),
                "expires_in": format_remaining(holder.ttl_remaining), "form": form,
                "changelist_url": back, "filters": list_filters(request.GET.get(FILTERS, "")),
            }
            request.current_app = model_admin.admin_site.name
            return TemplateResponse(request, model_admin.release_template, context)
        freed = backend.force_release_permit(name, holder.token)
    except (*ALIAS_ERRORS, SemaphoresNotSupported) as exc:
        messages.error(request, f"Nothing was freed: alias {alias!r} cannot be read. {exc}")
        return HttpResponseRedirect(back)
    if not freed:
        messages.warning(request, gone)
        return HttpResponseRedirect(back)
    model_admin.log_change(request, HeldLock(name=name), (
        f"Freed permit {number} of the semaphore (alias {alias!r}), held by "
        f"{describe_holder(holder)} since {holder.acquired_at:%Y-%m-%d %H:%M:%S} UTC "
        f"(purpose: {holder.purpose or 'none given'})."))
    messages.success(request, f"Freed permit {number} of the semaphore “{name}” (alias {alias}) "
                              f"held by {describe_holder(holder)}.")
    return HttpResponseRedirect(back)
