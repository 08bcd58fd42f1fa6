"""The breadcrumbs of the pages beside the list (a lock's page, a release's confirmation),
in the markup of the Django that serves them, so the admin's own CSS styles them: Django 6.1
renders ``<ol class="breadcrumbs">`` with one ``<li>`` per step, earlier versions
``<div class="breadcrumbs">`` with ``&rsaquo;`` between links. The list page keeps the stock
changelist's block, which is right on every version."""

from __future__ import annotations

from typing import Any, NamedTuple

import django

# The first version whose admin/base.html renders breadcrumbs as a list.
LIST_SINCE = (6, 1)


class Crumb(NamedTuple):
    label: str
    url: str | None  # None: the page itself


def breadcrumbs_context(crumbs: list[Crumb]) -> dict[str, Any]:
    """Return what admin/distlock/heldlock/breadcrumbs.html needs to render ``crumbs``."""
    return {"crumbs": crumbs, "crumbs_as_list": django.VERSION[:2] >= LIST_SINCE}
