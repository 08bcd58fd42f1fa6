"""The admin's "Held locks" page: every held lock of every alias, and an audited force release.

Nothing here is in the database: HeldLock is an unmanaged model that gives the page its
place in the admin, its permissions (``distlock.view_heldlock``, ``distlock.release_heldlock``)
and its LogEntry records. The page reads the backends (see distlock.admin.listing).

A force release names the hold by alias, name and fencing token (the holder's secret token
never leaves the server), shows a confirmation page on GET, and releases on a CSRF-checked
POST only if that same hold still has the lock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    QueryDict,
)
from django.template.defaultfilters import pluralize
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import capfirst
from django.utils.translation import gettext

from ..backends.kinds import KindDefinition, OperatorTexts, definition, several_holders, words
from ..backends.operations import Unsupported
from ..handler import locks
from ..info import LockInfo
from ..keys import MAX_NAME_LENGTH
from ..models import HeldLock
from .breadcrumbs import Crumb, breadcrumbs_context
from .detail import read_detail
from .display import (
    FILTERS,
    breakable,
    describe_holder,
    detail_url,
    format_remaining,
    release_url,
)
from .listing import (
    ALIAS_ERRORS,
    DEFAULT_ORDER,
    ORDERS,
    aliases_or_problem,
    eviction_warnings,
    find_held,
    read_infos,
    sort_held,
)
from .semaphores import SemaphoreRow, kind_rows, semaphore_row
from .shared import SharedRow, shared_row

PER_PAGE = 100
# The row of a held name of a kind with several holders, by its shape (OperatorTexts.shape).
ROW_SHAPES = {"permits": semaphore_row, "holders": shared_row}
# Query parameters of the list, as the admin's own changelist names them.
SEARCH, ALIAS, ORDER, PAGE = "q", "alias", "o", "p"
LIST_PARAMS = (SEARCH, ALIAS, ORDER, PAGE)


@dataclass(frozen=True)
class Row:
    info: LockInfo
    holder: str
    ttl_ms: int
    expires_in: str
    release_url: str
    detail_url: str

    @property
    def name_html(self) -> SafeString:
        return breakable(self.info.name)

    @property
    def purpose_html(self) -> SafeString:
        return breakable(self.info.purpose)


KindRow = TypeVar("KindRow", SemaphoreRow, SharedRow)


@dataclass(frozen=True)
class KindTable:
    """The table of one kind with several holders: its words and its rows."""

    texts: OperatorTexts
    rows: list[SemaphoreRow] | list[SharedRow]


@dataclass(frozen=True)
class Choice:
    label: str
    url: str
    selected: bool


@dataclass(frozen=True)
class PageLink:
    label: str
    url: str | None  # None: the current page, or an ellipsis
    current: bool = False


class HeldLockList:
    """The state of one list page: what the template knows as ``cl``."""

    has_filters = True  # the admin's change_list.html lays out the filter sidebar
    formset = None

    def __init__(self, request: HttpRequest, model_admin: HeldLockAdmin) -> None:
        self.opts = model_admin.opts
        self.params = {key: request.GET[key] for key in LIST_PARAMS if key in request.GET}
        self.aliases, problem = aliases_or_problem()
        self.unavailable = {"DISTLOCK": problem} if problem else {}
        self.query = self.params.get(SEARCH, "")
        self.alias = self.params.get(ALIAS, "") if self.params.get(ALIAS) in self.aliases else ""
        self.order = self.params.get(ORDER, "") if self.params.get(ORDER) in ORDERS else ""
        self.can_release = model_admin.has_release_permission(request)
        self.release_base = model_admin.url("release")
        self.detail_base = model_admin.url("detail")

        # Every alias is read, even when one is selected: the filter shows each one's count
        # (of every kind: locks, semaphores, shared locks) and an unreachable alias is
        # reported whatever the filter.
        filters = urlencode(self.params)
        held = find_held(self.aliases, self.query)
        self.unavailable.update(held.unavailable)
        where = (self.aliases, self.query)
        by_kind: dict[str, list[Any]] = {}
        for kind in several_holders():
            texts = kind_texts(kind)
            bases = (model_admin.url(f"release_{texts.url_word}"), self.detail_base)
            row = ROW_SHAPES[texts.shape]
            by_kind[kind.word] = kind_rows(kind.word, row, *where, bases, filters, self.unavailable)
        several = [row.held for rows in by_kind.values() for row in rows]
        self.counts = Counter(entry.alias for entry in [*held.names, *several])
        order = self.order or DEFAULT_ORDER
        selected = [entry for entry in held.names if not self.alias or entry.alias == self.alias]
        self.paginator = Paginator(sort_held(selected, order), PER_PAGE)
        self.page = self.paginator.get_page(self.params.get(PAGE))
        self.rows = [
            self._row(info) for info in read_infos(list(self.page.object_list), self.unavailable)
        ]
        shown = {word: self._shown(rows, order) for word, rows in by_kind.items()}
        self.kind_tables = [
            KindTable(kind_texts(definition(word)), rows) for word, rows in shown.items() if rows
        ]
        self.semaphores = shown.get("semaphore", [])  # (what tests and templates read)
        self.shared_locks = shown.get("shared", [])
        self.result_count = len(selected) + sum(map(len, shown.values()))

    def _shown(self, rows: list[KindRow], order: str) -> list[KindRow]:
        """Return the rows of a kind with several holders of the alias selected, in the
        page's order."""
        rows = [row for row in rows if not self.alias or row.held.alias == self.alias]
        return sorted(rows, key=lambda row: ORDERS[order].key(row.held))

    def url_with(self, **changes: str | int | None) -> str:
        """Return this page's query string with ``changes`` (None removes a parameter).

        Any change but the page's number starts again at the first page.
        """
        params: dict[str, Any] = dict(self.params)
        if set(changes) != {PAGE}:
            params.pop(PAGE, None)
        params.update(changes)
        return "?" + urlencode({key: value for key, value in params.items() if value is not None})

    def _row(self, info: LockInfo) -> Row:
        return Row(
            info=info,
            holder=breakable(describe_holder(info)),
            ttl_ms=round(info.ttl_remaining * 1000),
            expires_in=format_remaining(info.ttl_remaining),
            release_url=release_url(self.release_base, info, urlencode(self.params)),
            detail_url=detail_url(
                self.detail_base, info.alias, info.name, urlencode(self.params), kind="lock"
            ),
        )

    @property
    def has_active_filters(self) -> bool:
        return bool(self.query or self.alias or self.order)

    @property
    def alias_choices(self) -> list[Choice]:
        choices = [Choice("All", self.url_with(**{ALIAS: None}), not self.alias)]
        choices += [
            Choice(
                f"{alias} ({self.count_label(alias)})",
                self.url_with(**{ALIAS: alias}),
                alias == self.alias,
            )
            for alias in self.aliases
        ]
        return choices

    def count_label(self, alias: str) -> str:
        # An alias that could not be read has no count: "0" would say that nothing is held.
        return "unavailable" if alias in self.unavailable else str(self.counts[alias])

    @property
    def not_counted(self) -> list[str]:
        """The aliases shown (all, or the one selected) whose locks could not be read."""
        shown = [self.alias] if self.alias else [*self.aliases, *self.unavailable]
        return [alias for alias in dict.fromkeys(shown) if alias in self.unavailable]

    @property
    def answered(self) -> list[str]:
        """The aliases shown whose locks were read."""
        shown = [self.alias] if self.alias else self.aliases
        return [alias for alias in shown if alias not in self.unavailable]

    @property
    def count_text(self) -> str:
        """How many locks are listed, saying which aliases are not counted; "" when none is."""
        count = f"{self.result_count} held lock{pluralize(self.result_count)}"
        if not self.not_counted:
            return count
        if not self.answered:
            return ""
        return (
            f"{count} in {', '.join(self.answered)}; not counted: "
            f"{', '.join(self.not_counted)} (unavailable)"
        )

    @property
    def empty_text(self) -> str:
        """What the page says when no row is shown, never "none held" for an unread alias."""
        if not self.not_counted:
            if self.query:
                return f"No held lock has a name that starts with “{self.query}”."
            return "No lock is held right now."
        unknown = (
            f"What alias{'es' if len(self.not_counted) > 1 else ''} "
            f"{', '.join(self.not_counted)} hold{'' if len(self.not_counted) > 1 else 's'}"
            " is unknown: it could not be read."
        )
        if not self.answered:
            return unknown
        matching = f" whose name starts with “{self.query}”" if self.query else ""
        return f"No lock{matching} is held in {', '.join(self.answered)}. {unknown}"

    @property
    def filter_groups(self) -> list[tuple[str, str, list[Choice]]]:
        """The sidebar's filters: each one's data-filter-title, its summary and its choices."""
        return [("alias", "By alias", self.alias_choices), ("order", "Order", self.order_choices)]

    @property
    def order_choices(self) -> list[Choice]:
        current = self.order or DEFAULT_ORDER
        return [
            Choice(
                order.label,
                self.url_with(**{ORDER: None if key == DEFAULT_ORDER else key}),
                key == current,
            )
            for key, order in ORDERS.items()
        ]

    @property
    def show_all_url(self) -> str:
        return self.url_with(**{SEARCH: None})

    @property
    def search_hidden(self) -> list[tuple[str, str]]:
        """The parameters a new search keeps: the alias and the order, not the page."""
        return [(key, self.params[key]) for key in (ALIAS, ORDER) if key in self.params]

    @property
    def page_links(self) -> list[PageLink]:
        if self.paginator.num_pages < 2:
            return []
        links = []
        for number in self.paginator.get_elided_page_range(self.page.number):
            if number == self.paginator.ELLIPSIS:
                links.append(PageLink(str(number), None))
            elif number == self.page.number:
                links.append(PageLink(str(number), None, current=True))
            else:
                links.append(PageLink(str(number), self.url_with(**{PAGE: number})))
        return links


class ReleaseForm(forms.Form):
    """Which hold to release: the alias, the lock's name and the fencing token shown."""

    alias = forms.ChoiceField()
    name = forms.CharField(max_length=MAX_NAME_LENGTH, strip=False)
    fencing_token = forms.IntegerField(min_value=0)

    def __init__(self, data: QueryDict, *, aliases: list[str]) -> None:
        super().__init__(data)
        alias_field = self.fields["alias"]
        assert isinstance(alias_field, forms.ChoiceField)
        alias_field.choices = [(alias, alias) for alias in aliases]


class ReleaseRequest(NamedTuple):
    """A valid release request: the hold it names, and the list page to go back to."""

    form: ReleaseForm
    alias: str
    name: str
    fencing_token: int
    back: str


@admin.register(HeldLock)
class HeldLockAdmin(admin.ModelAdmin):
    """Held locks of every alias. Read-only but for the force release."""

    change_list_template = "admin/distlock/heldlock/change_list.html"
    detail_template = "admin/distlock/heldlock/lock_detail.html"
    release_template = "admin/distlock/heldlock/release_confirmation.html"

    # --- permissions ----------------------------------------------------------------------
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("distlock.view_heldlock")

    def has_release_permission(self, request: HttpRequest) -> bool:
        """Return True if the user may force release: seeing locks is needed too."""
        return self.has_view_permission(request) and request.user.has_perm(
            "distlock.release_heldlock"
        )

    # --- urls -----------------------------------------------------------------------------
    def get_urls(self) -> list[URLPattern]:
        # Only these: there are no rows in a table to add, change, delete or list history.
        views: list[tuple[str, Callable[..., HttpResponse], str]] = [
            ("", self.changelist_view, "changelist"),
            ("release/", self.release_view, "release"),
            ("lock/", self.detail_view, "detail"),
        ]
        # One release page per kind with several holders, named by its word
        # (release-permit/, release-shared/).
        for kind in several_holders():
            word = kind_texts(kind).url_word
            views.append((f"release-{word}/", self.release_hold_view(kind), f"release_{word}"))
        return [
            path(route, self.admin_site.admin_view(view), name=self.url_name(url_name))
            for route, view, url_name in views
        ]

    def url_name(self, view: str) -> str:
        return f"{self.opts.app_label}_{self.opts.model_name}_{view}"

    def url(self, view: str, filters: str = "") -> str:
        """Return the URL of one of this admin's views; ``filters`` restores a list's query."""
        url = reverse(f"admin:{self.url_name(view)}", current_app=self.admin_site.name)
        return f"{url}?{filters}" if filters else url

    # --- the list -------------------------------------------------------------------------
    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(["GET", "HEAD"])
        if not self.has_view_permission(request):
            raise PermissionDenied
        cl = HeldLockList(request, self)
        context = {
            **self.admin_site.each_context(request),
            "title": "Held locks",
            "opts": self.opts,
            "cl": cl,
            "eviction_warnings": eviction_warnings(aliases_or_problem()[0]),
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.change_list_template, context)

    # --- one lock and its waiters ----------------------------------------------------------
    def detail_view(self, request: HttpRequest) -> HttpResponse:
        """GET ?alias=A&name=N: the hold and who waits for it, oldest first."""
        if request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(["GET", "HEAD"])
        if not self.has_view_permission(request):
            raise PermissionDenied
        alias, name = request.GET.get("alias", ""), request.GET.get("name", "")
        kind = request.GET.get("kind", "")
        if alias not in aliases_or_problem()[0] or kind not in ("", *words()):
            return HttpResponseBadRequest(
                f"No DISTLOCK alias {alias!r} or no kind {kind!r}: pass ?alias=ALIAS&name=NAME "
                f"of a held lock, and &kind= one of {', '.join(words())} (optional).",
                content_type="text/plain; charset=utf-8",
            )
        filters = list_filters(request.GET.get("f", ""))
        bases = {
            kind.word: self.url(f"release_{kind_texts(kind).url_word}")
            for kind in several_holders()
        }
        try:
            detail = read_detail(alias, name, kind, bases, filters)
        except ValueError as exc:  # InvalidLockName
            return HttpResponseBadRequest(str(exc), content_type="text/plain; charset=utf-8")
        except ALIAS_ERRORS as exc:
            messages.error(request, f"Alias {alias!r} cannot be read. {exc}")
            return HttpResponseRedirect(self.url("changelist"))
        changelist_url = self.url("changelist", filters)
        context = {
            **self.admin_site.each_context(request),
            **self.breadcrumbs(changelist_url, Crumb(name, None)),
            "title": f"{detail.title} “{name}”",
            "opts": self.opts,
            "detail": detail,
            "can_release": self.has_release_permission(request),
            "changelist_url": changelist_url,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.detail_template, context)

    def breadcrumbs(self, changelist_url: str, *tail: Crumb) -> dict[str, Any]:
        """Return the breadcrumbs of a page below the list: Home, the app, the list, ``tail``."""
        app_list = reverse(
            "admin:app_list",
            kwargs={"app_label": self.opts.app_label},
            current_app=self.admin_site.name,
        )
        return breadcrumbs_context(
            [
                Crumb(gettext("Home"), reverse("admin:index", current_app=self.admin_site.name)),
                Crumb(str(self.opts.app_config.verbose_name), app_list),
                Crumb(capfirst(str(self.opts.verbose_name_plural)), changelist_url),
                *tail,
            ]
        )

    # --- force release --------------------------------------------------------------------
    def release_view(self, request: HttpRequest) -> HttpResponse:
        """GET: confirm what will be released. POST: release that hold, if it still is."""
        asked = self.release_request(request)
        if isinstance(asked, HttpResponse):
            return asked
        _, alias, name, fencing_token, back = asked
        try:
            backend = locks[alias]
            info = backend.info(name)
            if info is None or info.fencing_token != fencing_token:
                messages.warning(request, changed_message(alias, name, fencing_token, info))
                return HttpResponseRedirect(back)
            if request.method != "POST":
                return self._confirm(request, asked, info)
            # Only the token of the hold confirmed: if the lock changed hands since info(),
            # this releases nothing.
            released = backend.force_release(name, token=info.token)
        except ALIAS_ERRORS as exc:
            messages.error(request, f"Nothing was released: alias {alias!r} cannot be read. {exc}")
            return HttpResponseRedirect(back)
        if not released:
            messages.warning(request, changed_message(alias, name, fencing_token, None))
            return HttpResponseRedirect(back)
        self.log_change(request, HeldLock(name=name), release_record(info))
        messages.success(
            request,
            f"Released lock “{name}” (alias {alias}, fencing token {fencing_token}) "
            f"held by {describe_holder(info)}.",
        )
        return HttpResponseRedirect(back)

    def release_request(self, request: HttpRequest) -> ReleaseRequest | HttpResponse:
        """Return what a release request (GET: to confirm, POST: to release) names, or the
        answer refusing it. PermissionDenied without the release permission."""
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponseNotAllowed(["GET", "HEAD", "POST"])
        if not self.has_release_permission(request):
            raise PermissionDenied
        data = request.POST if request.method == "POST" else request.GET
        form = ReleaseForm(data, aliases=aliases_or_problem()[0])
        if not form.is_valid():
            return HttpResponseBadRequest(
                f"Not a valid release request:\n{form.errors.as_text()}",
                content_type="text/plain; charset=utf-8",
            )
        asked = form.cleaned_data
        back = self.url("changelist", list_filters(data.get(FILTERS, "")))
        return ReleaseRequest(form, asked["alias"], asked["name"], asked["fencing_token"], back)

    def release_hold_view(self, kind: KindDefinition) -> Callable[[HttpRequest], HttpResponse]:
        """The view releasing one hold of ``kind`` (a kind with several holders: a permit of
        a semaphore, a shared hold), named by its fencing token. GET: confirm which hold
        will be released. POST: release it, if that holder still has it."""

        def release_one_hold(request: HttpRequest) -> HttpResponse:
            return self._release_one_hold(request, kind.word, kind_texts(kind))

        return release_one_hold

    def _release_one_hold(
        self, request: HttpRequest, word: str, kind: OperatorTexts
    ) -> HttpResponse:
        """Release one of the holds of a kind with several holders, audited (each named by
        its fencing token)."""
        asked = self.release_request(request)
        if isinstance(asked, HttpResponse):
            return asked
        _, alias, name, number, back = asked
        gone = kind.gone.format(name=name, alias=alias, number=number)
        try:
            operations = locks[alias].of_kind(word)
            if isinstance(operations, Unsupported):  # said as an alias that cannot be read
                raise operations.error()
            holder = next((h for h in operations.inspect(name) if h.fencing_token == number), None)
            if holder is None:
                messages.warning(request, gone)
                return HttpResponseRedirect(back)
            if request.method != "POST":
                return self._confirm(request, asked, holder, kind)
            released = operations.force_release(name, holder.token)
        # (A kind's "not supported" error is a NotImplementedError, as Unsupported raises it.)
        except (*ALIAS_ERRORS, NotImplementedError) as exc:
            messages.error(
                request, f"Nothing was {kind.done}: alias {alias!r} cannot be read. {exc}"
            )
            return HttpResponseRedirect(back)
        if not released:
            messages.warning(request, gone)
            return HttpResponseRedirect(back)
        since = f"{holder.acquired_at:%Y-%m-%d %H:%M:%S}"
        who, purpose = describe_holder(holder), holder.purpose or "none given"
        self.log_change(
            request,
            HeldLock(name=name),
            kind.record.format(number=number, alias=alias, who=who, since=since, purpose=purpose),
        )
        messages.success(
            request, kind.success.format(number=number, name=name, alias=alias, who=who)
        )
        return HttpResponseRedirect(back)

    def _confirm(
        self,
        request: HttpRequest,
        asked: ReleaseRequest,
        info: LockInfo,
        kind: OperatorTexts | None = None,
    ) -> HttpResponse:
        """The confirmation page of a release: of the whole lock, or (``kind``) of one hold."""
        title = kind.release_title if kind is not None else "Force release a held lock"
        question = format_html(kind.release_question, name=info.name) if kind else ""
        context = {
            **self.admin_site.each_context(request),
            **self.breadcrumbs(asked.back, Crumb("Force release", None)),
            "title": title,
            "opts": self.opts,
            "lock": info,
            "question": question,
            "holder": describe_holder(info),
            "expires_in": format_remaining(info.ttl_remaining),
            "form": asked.form,
            "changelist_url": asked.back,
            "filters": list_filters(request.GET.get(FILTERS, "")),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.release_template, context)


def list_filters(query: str) -> str:
    """Return the list parameters of ``query`` (and nothing else) as a query string."""
    params = QueryDict(query)
    return urlencode([(key, params[key]) for key in LIST_PARAMS if key in params])


def changed_message(alias: str, name: str, fencing_token: int, now: LockInfo | None) -> str:
    shown = f"Lock “{name}” (alias {alias}) is no longer held with fencing token {fencing_token}"
    if now is None:
        return f"{shown}: it was released or expired. Nothing was released."
    return (
        f"{shown}: it is now held with fencing token {now.fencing_token} by "
        f"{describe_holder(now)}. Nothing was released; check the new holder before releasing "
        "again."
    )


def release_record(info: LockInfo) -> str:
    """Return the LogEntry message of a force release: what was released, from whom."""
    return (
        f"Force released fencing token {info.fencing_token} of alias {info.alias!r}, held by "
        f"{describe_holder(info)} since {info.acquired_at:%Y-%m-%d %H:%M:%S} UTC "
        f"(purpose: {info.purpose or 'none given'})."
    )


def kind_texts(kind: KindDefinition) -> OperatorTexts:
    """The words of a kind with several holders (several_holders() gives only those)."""
    assert kind.operator is not None
    return kind.operator
