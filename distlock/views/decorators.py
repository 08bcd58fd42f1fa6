"""``@lock_view``: run a view under a lock named from its request; answer a duplicate with 409.

    from distlock import lock_view

    @lock_view("pay:{order_id}", ttl=30)
    def pay(request, order_id): ...

Works on sync and async function views, on class-based views (decorate the class, or use
``method_decorator``) and on Django REST framework views. See docs/lock_view.md.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponseBase

from ..exceptions import BackendUnavailable, FencedUpdateRejected, LockNotAcquired
from ..info import LockInfo
from ..lock import Lock
from ..naming import compile_template
from ..semaphore import Semaphore
from ..validation import lease_milliseconds, seconds
from .release import LockRelease
from .request_values import auser_value, callable_name, user_value
from .responses import LockContended, LockFenced, LockServiceUnavailable
from .transactions import RequestTransactions, request_transactions

logger = logging.getLogger("distlock")
V = TypeVar("V", bound=Callable[..., Any])
OnLocked = Callable[[HttpRequest, LockNotAcquired], Any]
DEFAULT_METHODS = ("POST", "PUT", "PATCH", "DELETE")
AT_LIMIT_DETAIL = "Too many of these requests are in progress. Try again when one has finished."
_METHOD = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")  # an HTTP token


def lock_view(
    name: str | Callable[..., str] | None = None,
    *,
    ttl: float | None = None,
    wait: float | None = 0,
    methods: Iterable[str] = DEFAULT_METHODS,
    using: str = "default",
    on_locked: OnLocked | None = None,
    fail_open: bool = False,
    limit: int | None = None,
    hold_until_commit: bool = True,
    fence: bool = False,
    fair: bool | None = None,
) -> Callable[[V], V]:
    """Decorate a view so that requests with the same lock name never run at the same time.

    ``name`` is a template over the view's keyword arguments (``{order_id}``), positional ones
    (``{0}``), ``{user}`` and ``{request.<attribute>}``, or a callable ``(request, *args,
    **kwargs) -> str``; None means one lock per view per user. A request whose method is in
    ``methods`` and whose lock is held (after waiting ``wait`` seconds) gets ``409 Conflict``
    with ``Retry-After``, or what ``on_locked(request, exc)`` returns. If the lock server cannot
    be reached the answer is ``503``, unless ``fail_open=True`` runs the view unlocked.

    ``limit=N`` lets up to N requests with the same name run at once (a semaphore, see
    distlock.semaphore) instead of one; the others are answered as above, or wait.

    Under ``ATOMIC_REQUESTS`` the lock is taken before the request's transaction begins and
    released after it ends. Inside a transaction of the caller's, the release waits for it
    (``hold_until_commit``, see distlock.lock).

    The view reaches its lock as ``request.distlock`` (None for a method that is not locked).
    ``fence=True`` claims the lock's fencing token in each database transaction the view
    runs: a request whose lease ended (a paused worker, a lock server restarted empty) is
    refused once a newer request has claimed it, its transaction rolled back, and answered
    ``409 Conflict`` (LockFenced).
    (``hold_until_commit``, see distlock.lock). ``fair=False``: a free lock goes to whichever
    request asks first, not to the one that waited longest (see distlock.lock; None: the
    alias's ``OPTIONS['FAIR']``).
    """
    options = ViewLockOptions(
        name,
        ttl=ttl,
        wait=wait,
        methods=methods,
        using=using,
        on_locked=on_locked,
        fail_open=fail_open,
        limit=limit,
        hold_until_commit=hold_until_commit,
        fence=fence,
        fair=fair,
    )

    def decorator(view: V) -> V:
        if isinstance(view, type):
            return _decorate_class(view, options)  # type: ignore[return-value]
        if not callable(view):
            hint = " Write @lock_view() with parentheses." if isinstance(view, HttpRequest) else ""
            raise TypeError(f"lock_view decorates views, not {type(view).__name__}.{hint}")
        view_lock = ViewLock(options, qualified_name(view))
        view_lock.check_parameters(view)
        return view_lock.wrap(view)

    return decorator


class ViewLockOptions:
    """The arguments of one ``lock_view(...)`` call, checked when the view is decorated."""

    def __init__(
        self,
        name: Any,
        *,
        ttl: Any,
        wait: Any,
        methods: Any,
        using: Any,
        on_locked: Any,
        fail_open: Any,
        limit: Any = None,
        hold_until_commit: Any = True,
        fence: Any = False,
        fair: Any = None,
    ) -> None:
        if name is not None and not isinstance(name, str) and not callable(name):
            raise TypeError(
                "lock_view name must be a template str, a callable (request, *args, **kwargs) "
                f"-> str, or None, not {type(name).__name__}."
            )
        self.template = compile_template(name) if isinstance(name, str) else None
        self.name_callable = name if callable(name) else None
        self.ttl = seconds("ttl", ttl, allow_none=True)
        if self.ttl is not None:
            lease_milliseconds("ttl", self.ttl)
        self.wait = seconds("wait", wait, allow_none=True, allow_zero=True)
        self.methods = _checked_methods(methods)
        if not isinstance(using, str):
            raise TypeError(f"using must be a DISTLOCK alias (str), not {using!r}.")
        self.using = using
        if on_locked is not None and not callable(on_locked):
            raise TypeError(
                f"on_locked must be a callable (request, exc) -> HttpResponse, not {on_locked!r}."
            )
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise TypeError(f"limit must be a whole number of requests or None, not {limit!r}.")
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}.")
        self.limit: int | None = limit
        self.on_locked: OnLocked = on_locked or (
            LockContended() if limit is None else LockContended(AT_LIMIT_DETAIL)
        )
        for label, flag in (
            ("fail_open", fail_open),
            ("hold_until_commit", hold_until_commit),
            ("fence", fence),
        ):
            if not isinstance(flag, bool):
                raise TypeError(f"{label} must be True or False, not {flag!r}.")
        if fence and limit is not None:
            raise ValueError(
                "fence=True fences one holder at a time; limit=N lets N requests run at once, "
                "so a newer one's claim would refuse the others. Use one or the other."
            )
        self.fail_open = fail_open
        self.hold_until_commit = hold_until_commit
        self.fence = fence
        if fair is not None and not isinstance(fair, bool):
            raise TypeError(f"fair must be True, False or None (the alias's FAIR), not {fair!r}.")
        if fair is False and limit is not None:
            raise ValueError(
                "fair=False applies to locks: with limit=N the requests wait for a permit "
                "first come, first served. Leave fair out, or drop limit."
            )
        self.fair: bool | None = fair


def _checked_methods(methods: Any) -> frozenset[str]:
    if isinstance(methods, (str, bytes)) or not isinstance(methods, Iterable):
        raise TypeError(
            f"methods must be a list or tuple of HTTP method names such as ('POST',), not "
            f"{methods!r}."
        )
    names = list(methods)
    if not names:
        raise ValueError(
            "methods cannot be empty: nothing would be locked. Leave lock_view out instead."
        )
    for method in names:
        if not isinstance(method, str) or not _METHOD.match(method):
            raise ValueError(f"methods must hold HTTP method names such as 'POST', not {method!r}.")
    return frozenset(method.upper() for method in names)


def qualified_name(view: Any) -> str:
    """Return ``module.qualname`` of a view: the lock's purpose, shown to operators."""
    instance = getattr(getattr(view, "func", None), "__self__", None)
    if isinstance(view, functools.partial) and instance is not None:
        # method_decorator's bound method: name the view's class, not the one defining it
        # (an inherited dispatch() would otherwise give every view the same default name).
        cls = type(instance)
        return f"{cls.__module__}.{cls.__qualname__}.{view.func.__name__}"
    module = getattr(view, "__module__", None) or type(view).__module__
    qualname = getattr(view, "__qualname__", None) or type(view).__qualname__
    return f"{module}.{qualname}"


class ViewLock:
    """The lock of one decorated view: how it is named, taken, answered and released."""

    def __init__(self, options: ViewLockOptions, purpose: str) -> None:
        self.options = options
        self.purpose = purpose
        self.methods = options.methods
        self.template = options.template
        if self.template is None and options.name_callable is None:
            # One lock per view per user. The view's name is literal text: braces doubled.
            escaped = purpose.replace("{", "{{").replace("}", "}}")
            self.template = compile_template(f"{escaped}:{{user}}")
        self.where = f"lock_view on {purpose}"
        # The metrics' distlock.name: the template (bounded), never the name made from it.
        self.metric_name = self.template.template if self.template is not None else purpose

    def check_parameters(self, view: Callable[..., Any]) -> None:
        """Fail now if the template names a keyword argument the view cannot take."""
        if self.template is not None:
            self.template.check_view_arguments(_keyword_parameters(view), self.where)

    def wrap(self, view: V, transactions: RequestTransactions | None = None) -> V:
        """Return ``view`` running under this lock (a sync or an async function, like it).

        A sync view opens its ``ATOMIC_REQUESTS`` transactions itself, inside the lock
        (views/transactions.py); ``transactions`` are a class-based view's, when given.
        """
        if iscoroutinefunction(view) or _dispatches_async_handlers(view):

            async def async_locked(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                return await self.arun(view, request, args, kwargs)

            return functools.wraps(view)(async_locked)  # type: ignore[return-value]

        inside = transactions if transactions is not None else request_transactions(view)

        def locked(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            return self.run(view, request, args, kwargs, inside)

        wrapped = functools.wraps(view)(locked)
        wrapped._non_atomic_requests = inside  # type: ignore[attr-defined]
        return wrapped  # type: ignore[return-value]

    # --- naming -------------------------------------------------------------------------
    def lock_for(self, name: str) -> Lock:
        options = self.options
        settings: dict[str, Any] = {
            "ttl": options.ttl,
            "wait": options.wait,
            "using": options.using,
            "purpose": self.purpose,
            "hold_until_commit": options.hold_until_commit,
            "metric_name": self.metric_name,
        }
        if options.limit is not None:
            return Semaphore(name, options.limit, **settings)
        return Lock(name, fence=options.fence, fair=options.fair, **settings)

    def name_for(self, request: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        template = self.template
        if template is None:
            name = self.options.name_callable
            return callable_name(name, request, args, kwargs, self.where)  # type: ignore[arg-type]
        user = user_value(getattr(request, "user", None), request) if template.uses_user else ""
        return template.render(request, args, kwargs, self.where, user)

    async def aname_for(self, request: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        if self.template is None or not self.template.uses_user:
            return self.name_for(request, args, kwargs)
        user = await auser_value(request)
        return self.template.render(request, args, kwargs, self.where, user)

    # --- running ------------------------------------------------------------------------
    def run(
        self,
        view: Callable[..., Any],
        request: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        transactions: RequestTransactions,
    ) -> Any:
        """Call a sync view under the lock, inside the request's transactions."""
        request.distlock = None
        if request.method not in self.methods:
            return transactions.run(view, request, *args, **kwargs)
        lock = self.lock_for(self.name_for(request, args, kwargs))
        try:
            acquired = lock.acquire()
        except BackendUnavailable as exc:
            refusal = self._refuse_unavailable(request, lock, exc)
            if refusal is not None:
                return refusal
            return transactions.run(view, request, *args, **kwargs)
        if not acquired:
            return self.options.on_locked(request, self._contended(lock, lock.holder()))
        request.distlock = lock
        release = LockRelease(lock)
        try:
            response = transactions.run(view, request, *args, **kwargs)
        except FencedUpdateRejected as exc:  # rolled back: a newer request holds the lock
            release.release()
            return self._fenced(request, exc)
        except BaseException:
            release.release()
            raise
        return release.after(response)

    async def arun(
        self, view: Callable[..., Any], request: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Call an async view (or a sync one returning an awaitable) under the lock."""
        request.distlock = None
        if request.method not in self.methods:
            return await _result(view(request, *args, **kwargs))
        lock = self.lock_for(await self.aname_for(request, args, kwargs))
        try:
            acquired = await lock.aacquire()
        except BackendUnavailable as exc:
            refusal = self._refuse_unavailable(request, lock, exc)
            return refusal if refusal is not None else await _result(view(request, *args, **kwargs))
        if not acquired:
            contended = self._contended(lock, await lock.aholder())
            return await _result(self.options.on_locked(request, contended))
        request.distlock = lock
        release = LockRelease(lock)
        try:
            response = await _result(view(request, *args, **kwargs))
        except FencedUpdateRejected as exc:  # rolled back: a newer request holds the lock
            await release.arelease()
            return self._fenced(request, exc)
        except BaseException:  # also CancelledError: Django cancels a view whose client left
            await release.arelease()
            raise
        return await release.aafter(response)

    def _fenced(self, request: Any, exc: FencedUpdateRejected) -> HttpResponseBase:
        logger.warning("lock_view: %s did not take effect: %s", self.purpose, exc)
        return LockFenced()(request, exc)

    def _contended(self, lock: Lock, holder: LockInfo | None) -> LockNotAcquired:
        return LockNotAcquired(lock.name, holder=holder, wait=lock.wait)

    def _refuse_unavailable(
        self, request: Any, lock: Lock, exc: BackendUnavailable
    ) -> HttpResponseBase | None:
        """Return the 503 answer, or None to run the view unlocked (fail_open)."""
        if exc.name is None:
            exc.name = lock.name
        if self.options.fail_open:
            logger.warning(
                "lock_view: the lock server is unreachable, so %s runs WITHOUT its lock %r "
                "(fail_open=True): %s",
                self.purpose,
                lock.name,
                exc,
            )
            return None
        logger.error(
            "lock_view: the lock server is unreachable, so %s answered 503 for %r: %s",
            self.purpose,
            lock.name,
            exc,
        )
        return LockServiceUnavailable()(request, exc)


def _decorate_class(cls: type, options: ViewLockOptions) -> type:
    """Lock a class-based view: each request's handler for a locked method runs under it.

    The handler is wrapped per request, inside dispatch(), so Django REST framework has
    authenticated the request first ({user} is its user) and viewset actions are covered.
    """
    dispatch = getattr(cls, "dispatch", None)
    if not callable(dispatch):
        raise TypeError(
            f"lock_view decorates view functions and class-based views (with a dispatch() "
            f"method); {cls.__qualname__} has no dispatch()."
        )
    view_lock = ViewLock(options, qualified_name(cls))
    transactions = request_transactions(dispatch)
    is_async = bool(getattr(cls, "view_is_async", False))

    @functools.wraps(dispatch)
    def locked_dispatch(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        if request.method in view_lock.methods:
            handler_name = request.method.lower()
            handler = getattr(self, handler_name, None)
            if handler is not None:
                setattr(self, handler_name, view_lock.wrap(handler, transactions))
                return dispatch(self, request, *args, **kwargs)
        request.distlock = None  # a method that is not locked
        if is_async:
            return dispatch(self, request, *args, **kwargs)
        # an unlocked method: the transaction Django would open
        return transactions.run(dispatch, self, request, *args, **kwargs)

    if not is_async:  # Django refuses ATOMIC_REQUESTS for async views: leave that to it
        locked_dispatch._non_atomic_requests = transactions  # type: ignore[attr-defined]
    cls.dispatch = locked_dispatch  # type: ignore[attr-defined]
    return cls


def _keyword_parameters(view: Callable[..., Any]) -> set[str] | None:
    """Return the names a view accepts as keyword arguments (None: any, or unknown)."""
    if isinstance(view, functools.partial):  # method_decorator's bound method: checked at call
        return None
    try:
        parameters = inspect.signature(view).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters):
        return None
    keyword_kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {parameter.name for parameter in parameters if parameter.kind in keyword_kinds}


def _dispatches_async_handlers(view: Callable[..., Any]) -> bool:
    """Return True for method_decorator's dispatch() of an async class-based view: a sync
    method returning its handler's coroutine, so it must be locked the async way."""
    instance = getattr(getattr(view, "func", None), "__self__", None)
    return instance is not None and bool(getattr(type(instance), "view_is_async", False))


async def _result(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


__all__ = ["DEFAULT_METHODS", "lock_view"]
