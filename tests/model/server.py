"""The server under check: fakeredis with Lua, running distlock's real scripts on the virtual
clock, its whole data set saved and restored as a plain value (the explorer's state).

fakeredis (2.41) stores the expiry of ``PSETEX`` and ``SETEX`` truncated to whole seconds
(``int(now + ms / 1000)``): a handoff's reservation (``PSETEX``) would end up to a second
early. Both are replaced here by exact ones; ``PEXPIRE`` and ``SET ... PX`` are exact."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from importlib.resources.abc import Traversable
from typing import Any

import fakeredis
from fakeredis import _msgs
from fakeredis._command_args_parsing import Int
from fakeredis._commands import Key, command
from fakeredis._core import CommandItem
from fakeredis._helpers import OK, SimpleError, SimpleString
from fakeredis._socket import _base
from fakeredis.commands_mixins import server_mixin, string_mixin
from fakeredis.model._hash import Hash
from fakeredis.model._zset import ZSet

from distlock.backends.redis_ops import scripts

from .clock import ServerClock

# One key as the model keeps it: (name, type, value, expiry in server ms or None). A value is
# a str (string), a tuple of str (list), or a tuple of (member, score) / (field, value) pairs
# (zset, hash), sorted.
Entry = tuple[str, str, Any, int | None]
Data = tuple[Entry, ...]


@dataclasses.dataclass(frozen=True)
class Edit:
    """A textual edit of one script file (a mutant): ``old`` replaced by ``new``."""

    file: str  # relative to the lua folder: "acquire.lua", "include/hand_over.lua"
    old: str
    new: str


@dataclasses.dataclass(frozen=True)
class Call:
    """One script call: its file's name, keys and arguments."""

    script: str
    keys: tuple[str, ...]
    args: tuple[Any, ...]


CLOCK = ServerClock()


class _Time:
    """What fakeredis reads as the ``time`` module for a command's "now": the model's clock."""

    @staticmethod
    def time() -> float:
        return CLOCK.time()


class _TimeCommand:
    """What fakeredis' TIME command reads: the model's clock in µs."""

    @staticmethod
    def time() -> float:
        return CLOCK.time_us()


@command((Key(), Int, bytes))
def _psetex(self: Any, key: CommandItem, ms: int, value: bytes) -> SimpleString:
    if ms <= 0:
        raise SimpleError(_msgs.INVALID_EXPIRE_MSG.format("psetex"))
    key.value = value
    key.expireat = self._db.time + ms / 1000.0
    return OK


@command((Key(), Int, bytes))
def _setex(self: Any, key: CommandItem, seconds: int, value: bytes) -> SimpleString:
    if seconds <= 0:
        raise SimpleError(_msgs.INVALID_EXPIRE_MSG.format("setex"))
    key.value = value
    key.expireat = self._db.time + seconds
    return OK


def _patch_fakeredis() -> None:
    """Put fakeredis on the model's clock and make PSETEX and SETEX exact (see above)."""
    _base.time = _Time  # type: ignore[assignment]  # every command's "now"
    server_mixin.time = _TimeCommand  # type: ignore[assignment]  # TIME
    string_mixin.StringCommandsMixin.psetex = _psetex  # type: ignore[method-assign]
    string_mixin.StringCommandsMixin.setex = _setex  # type: ignore[method-assign]


_patch_fakeredis()


class _Edited:
    """The lua folder as scripts.expand reads it, with one file edited (a mutant)."""

    def __init__(self, folder: Traversable, path: str, edit: Edit | None) -> None:
        self.folder, self.path, self.edit = folder, path, edit

    def joinpath(self, *parts: str) -> _Edited:
        path = "/".join(p for p in (self.path, *parts) if p)
        return _Edited(self.folder.joinpath(*parts), path, self.edit)

    def read_text(self, encoding: str = "utf-8") -> str:
        text = self.folder.read_text(encoding=encoding)
        if self.edit is not None and self.path == self.edit.file:
            if self.edit.old not in text:
                raise ValueError(f"mutant: {self.edit.old!r} is not in {self.path}")
            text = text.replace(self.edit.old, self.edit.new, 1)
        return text


def script_source(name: str, edit: Edit | None = None) -> str:
    """Return script ``name`` as the server runs it (includes expanded by the project's own
    scripts.expand), with ``edit`` applied to the file it names."""
    folder = _Edited(scripts.LUA, "", edit)
    return scripts.expand(folder, folder.joinpath(f"{name}.lua").read_text())  # type: ignore[arg-type]


class Server:
    """One fakeredis server with the scripts loaded (a mutant's, if ``edit`` is given)."""

    def __init__(self, names: Sequence[str], edit: Edit | None = None) -> None:
        self.fake = fakeredis.FakeServer()
        self.redis = fakeredis.FakeStrictRedis(server=self.fake, decode_responses=True)
        self.sha = {name: self.redis.script_load(script_source(name, edit)) for name in names}
        self.edit = edit

    def run(self, call: Call) -> Any:
        """Run ``call`` now; an error reply comes back as the exception, not raised."""
        CLOCK.micro += 1
        try:
            return self.redis.evalsha(self.sha[call.script], len(call.keys), *call.keys, *call.args)
        except Exception as error:  # a script error is a finding, reported by the caller
            return error

    def lpop(self, key: str) -> str | None:
        return self.redis.lpop(key)  # type: ignore[return-value]

    # --- the data set as a value ---------------------------------------------------------

    def dump(self) -> Data:
        """Return every live key, sorted, as plain values."""
        return tuple(sorted(_entries(self.fake.dbs[0]._dict, CLOCK.time())))

    def load(self, data: Data, now_ms: int, micro: int = 0) -> None:
        """Make the server hold exactly ``data`` at server time ``now_ms`` (+ ``micro`` µs)."""
        CLOCK.now_ms, CLOCK.micro = now_ms, micro
        db = self.fake.dbs[0]
        db._dict.clear()
        db._expiry_heap.clear()
        for name, kind, value, expiry_ms in data:
            item = _base_item(kind, value)
            item.expireat = None if expiry_ms is None else expiry_ms / 1000
            db[name.encode()] = item
        db.time = CLOCK.time()


def _entries(items: dict[bytes, Any], now: float) -> Iterator[Entry]:
    for raw, item in items.items():
        if item.expireat is not None and item.expireat < now:
            continue  # expired: Redis would not return it
        # Redis keeps an expiry in whole ms (the command's ms clock + the TTL)
        expiry = None if item.expireat is None else math.floor(item.expireat * 1000 + 1e-6)
        value = item.value
        if isinstance(value, bytes):
            frozen: Any = value.decode()
            kind = "string"
        elif isinstance(value, list):
            frozen, kind = tuple(v.decode() for v in value), "list"
        elif isinstance(value, ZSet):
            frozen = tuple(sorted((m.decode(), s) for m, s in value.items()))
            kind = "zset"
        elif isinstance(value, Hash):
            frozen = tuple(sorted((f.decode(), v.decode()) for f, v in value.items()))
            kind = "hash"
        else:
            raise TypeError(f"the model does not keep a {type(value).__name__} ({raw!r})")
        yield raw.decode(), kind, frozen, expiry


def _base_item(kind: str, value: Any) -> Any:
    from fakeredis._core import Item

    if kind == "string":
        return Item(value.encode())
    if kind == "list":
        return Item([v.encode() for v in value])
    if kind == "zset":
        zset = ZSet()
        for member, score in value:
            zset.add(member.encode(), score)
        return Item(zset)
    stored = Hash()
    for field, text in value:
        stored[field.encode()] = text.encode()
    return Item(stored)
