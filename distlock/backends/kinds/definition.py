"""What defines a kind of hold: its word, its operations base, what a backend without it
raises, where each backend family keeps its operations class, and what operators are told of
it. One KindDefinition per kind, in a module of its own beside this one, named in the
registry (distlock.backends.kinds).

The backends, the admin and ``manage.py distlock`` read these definitions instead of naming
the kinds: a new kind is its definition, its operations classes and its Lock subclass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import import_module
from typing import Any

from ..operations import Operations, Unsupported


@dataclass(frozen=True)
class ReleaseTexts:
    """What ``manage.py distlock release`` says of a released hold, each formatted with
    ``name``, ``alias``, ``h`` (the holder's LockInfo) and ``since`` (when it was acquired,
    UTC)."""

    gone: str  # the hold ended (or changed hands) before it could be released
    logged: str  # the log record of the release
    done: str  # the line on stdout


@dataclass(frozen=True)
class OperatorTexts:
    """What operators are shown of a kind with several holders per name (the exclusive kind
    has the surfaces' own table). ``shape``: "permits" shows held permits of a limit,
    "holders" how many hold; a new kind picks one."""

    shape: str
    # The admin's list: the table's heading, CSS word and id, its count column (CSS word and
    # heading), what names a hold, and the label of each hold's release link.
    title: str
    css: str
    table_id: str
    count: str
    count_label: str
    number: str
    release_label: str
    # The admin's page of one name: its title, the Kind row, the count cell's CSS word, the
    # holders' heading and number column, the noun in "Nobody waits for this ...", and (when
    # the kind's queue keeps how many wait, not who) what the page says, with {waiting}.
    detail_title: str
    kind_text: str
    count_field: str
    holders_heading: str
    number_heading: str
    noun: str
    queue_unknown: str
    # The admin's release of one hold: its URL's word (``release-<word>/``), the page's
    # title and question ({name}), the past participle of the release, and the messages
    # (.format(name, alias, number, who, since, purpose) as each needs).
    url_word: str
    release_title: str
    release_question: str
    done: str
    gone: str
    record: str
    success: str
    # ``manage.py distlock``: the list's header; ``info``'s first line's label, its count
    # line (``{held}``, ``{limit}``, ``{waiting}``) and each holder's line (``{h}``, the
    # holder's LockInfo, ``{purpose}``); the errors of a release without the holder's token
    # (``{name}``, ``{count}``) or with a wrong one (``{name}``, ``{token}``).
    header: tuple[str, str, str, str]
    info_name: str
    info_count: str
    holder_line: str
    token_needed: str
    no_such_token: str


@dataclass(frozen=True)
class KindDefinition:
    """One kind of hold."""

    # What a Lock's ``kind`` and the metrics' distlock.kind say; the key of
    # ``backend.of_kind``.
    word: str
    # The base of every backend's operations class of this kind.
    operations: type[Operations]
    # What a backend without the kind keeps: acquiring raises ``not_supported(backend)``.
    unsupported: type[Unsupported]
    not_supported: Callable[[Any], Exception]
    # Backend family (a backend's ``kind_family``) -> "module.Class" of its operations of
    # this kind: imported when a backend of that family first needs them, so that no module
    # of a backend is imported by the registry (they import the backends' base).
    classes: Mapping[str, str] = field(default_factory=dict)
    # When the kind is a hold of the lock itself (shared): ``backend.info`` shows it, and
    # the lock's queue says who waits.
    on_lock: bool = False
    # What ``manage.py distlock release`` says of a released hold.
    release: ReleaseTexts | None = None
    # What operators are shown (None: the exclusive kind, shown by the surfaces' own table).
    operator: OperatorTexts | None = None

    def class_for(self, family: str) -> type[Operations] | None:
        """Return the operations class of this kind in backend ``family``, None if it has
        none."""
        path = self.classes.get(family)
        return None if path is None else _imported(path)


@cache
def _imported(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(import_module(module), name)
