"""Lock name templates, whose values can never reshape a name: ``"pay:{order_id}:{user}"``.

A template is compiled once (when a view is decorated, or a command's ``lock_name`` first
used). Each value is escaped (distlock.naming.escaping), so a value never contains the
template's separators and two templates' worth of values cannot run into each other: with a
separator such as ``:`` between any two fields, different values always give different names.
A name that would be longer than a lock name may be has its long values digested, so values
never make a name invalid. Fields are the keyword arguments (``{order_id}``), positional ones
(``{0}``), ``{user}`` and ``{request.<attr>}`` of a view; a command uses keyword fields only.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from ..keys import FORBIDDEN, MAX_NAME_LENGTH
from .escaping import DIGEST_LENGTH, VALUE_CHARACTERS, digest, escape

__all__ = ["Field", "NameTemplate", "compile_template"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_FORMATTER = string.Formatter()


@dataclass(frozen=True)
class Field:
    """One ``{...}`` of a template: where its value comes from, and how it is formatted."""

    text: str  # as written, for messages: "{order_id}"
    source: str  # "kwarg", "arg", "user" or "request"
    key: str | int  # the keyword name or positional index ("" for user/request)
    attributes: tuple[str, ...]  # then looked up one after another
    conversion: str | None
    spec: str

    def value(self, request: Any, args: Sequence[Any], kwargs: dict[str, Any], where: str) -> str:
        if self.source == "request":
            value = request
        elif self.source == "kwarg":
            if self.key not in kwargs:
                raise self._missing(where, f"keyword arguments {sorted(kwargs) or 'none'}")
            value = kwargs[self.key]
        else:
            if self.key >= len(args):  # type: ignore[operator]
                raise self._missing(where, f"{len(args)} positional argument(s)")
            value = args[self.key]  # type: ignore[index]
        for attribute in self.attributes:
            try:
                value = getattr(value, attribute)
            except AttributeError:
                raise ImproperlyConfigured(
                    f"{where}: the lock name field {self.text} looks up .{attribute} on a "
                    f"{type(value).__name__}, which has no such attribute."
                ) from None
        if self.conversion:
            value = _FORMATTER.convert_field(value, self.conversion)
        return escape(format(value, self.spec))

    def _missing(self, where: str, given: str) -> ImproperlyConfigured:
        return ImproperlyConfigured(
            f"{where}: the lock name field {self.text} names an argument the view was not "
            f"called with (it got {given}). Fix the lock_view name or the URL pattern."
        )


class NameTemplate:
    """A compiled lock name template: literal text (the developer's) and fields (the request's)."""

    def __init__(self, template: str) -> None:
        self.template = template
        self.literals: list[str] = []
        self.fields: list[Field] = []
        self._parse()

    def __repr__(self) -> str:
        return f"<NameTemplate {self.template!r}>"

    def _parse(self) -> None:
        try:
            parts = list(_FORMATTER.parse(self.template))
        except ValueError as exc:
            raise ValueError(
                f"lock_view name {self.template!r} is not a valid template: {exc}."
            ) from None
        literal = ""
        for text, field_name, spec, conversion in parts:
            literal += text
            if field_name is None:
                continue
            self.literals.append(literal)
            self.fields.append(self._field(field_name, spec or "", conversion))
            literal = ""
        self.literals.append(literal)
        self.uses_user = any(field.source == "user" for field in self.fields)
        self._check()

    def _field(self, field_name: str, spec: str, conversion: str | None) -> Field:
        shown = (
            "{"
            + field_name
            + (f"!{conversion}" if conversion else "")
            + (f":{spec}" if spec else "")
            + "}"
        )
        problem = self._field_problem(field_name, spec, conversion)
        if problem:
            raise ValueError(f"lock_view name {self.template!r}: the field {shown} {problem}")
        root, *attributes = field_name.split(".")
        key: str | int
        if root.isdigit():
            source, key = "arg", int(root)
        elif root in ("user", "request"):
            source, key = root, ""
        else:
            source, key = "kwarg", root
        if source == "user" and (attributes or spec or conversion):
            raise ValueError(
                f"lock_view name {self.template!r}: {shown} takes no attributes or format; "
                "use {request.user.<attribute>} for another attribute of the user."
            )
        return Field(shown, source, key, tuple(attributes), conversion, spec)

    @staticmethod
    def _field_problem(field_name: str, spec: str, conversion: str | None) -> str:
        if conversion not in (None, "r", "s", "a"):
            return "has an unknown conversion; use !r, !s or !a."
        if not field_name:
            return (
                "has no name; number positional arguments ({0}, {1}) or name keyword "
                "arguments ({order_id})."
            )
        if "[" in field_name:
            return (
                "uses an index lookup; take such values with a callable name: "
                "lock_view(lambda request, *args, **kwargs: ...)."
            )
        if "{" in spec:
            return "has a nested field in its format; format values with a plain spec."
        root, *attributes = field_name.split(".")
        if not (root.isdigit() or _IDENTIFIER.match(root)) or not all(
            _IDENTIFIER.match(attribute) for attribute in attributes
        ):
            return "is not a keyword argument, a positional index, {user} or {request.<attribute>}."
        return ""

    def _check(self) -> None:
        if not self.template:
            raise ValueError(
                "lock_view name cannot be empty; pass None for one lock per view per user."
            )
        for literal in self.literals:
            forbidden = FORBIDDEN.search(literal)
            if forbidden:
                raise ValueError(
                    f"lock_view name {self.template!r} contains the control character "
                    f"{forbidden.group()!r}; use printable text."
                )
        for position, between in enumerate(self.literals[1:-1]):
            if VALUE_CHARACTERS.fullmatch(between):
                first, second = self.fields[position].text, self.fields[position + 1].text
                raise ValueError(
                    f"lock_view name {self.template!r}: put a separator such as ':' or '/' "
                    f"between {first} and {second}, so that different values can never give "
                    "the same name."
                )
        shortest = sum(map(len, self.literals)) + DIGEST_LENGTH * len(self.fields)
        if shortest > MAX_NAME_LENGTH:
            raise ValueError(
                f"lock_view name template is too long: even with every value digested its names "
                f"would exceed {MAX_NAME_LENGTH} characters."
            )

    def check_view_arguments(self, parameters: set[str] | None, where: str) -> None:
        """Raise ImproperlyConfigured for a keyword field that is not among ``parameters``
        (None: the view takes any keyword argument)."""
        if parameters is None:
            return
        for field in self.fields:
            if field.source == "kwarg" and field.key not in parameters:
                raise ImproperlyConfigured(
                    f"{where}: the lock name field {field.text} is not an argument of the view "
                    f"(it takes {', '.join(sorted(parameters)) or 'no keyword arguments'})."
                )

    def render(
        self, request: Any, args: Sequence[Any], kwargs: dict[str, Any], where: str, user: str = ""
    ) -> str:
        """Return the lock name for one request (``user``: the {user} value, if used)."""
        values = [
            user if field.source == "user" else field.value(request, args, kwargs, where)
            for field in self.fields
        ]
        return self.join(values)

    def join(self, values: list[str]) -> str:
        name = self._joined(values)
        if len(name) > MAX_NAME_LENGTH:
            # Digest the values too long to keep; _check() made sure that is enough.
            name = self._joined([v if len(v) <= DIGEST_LENGTH else digest(v) for v in values])
        return name or digest("")  # a lone field with an empty value

    def _joined(self, values: list[str]) -> str:
        parts = [self.literals[0]]
        for value, literal in zip(values, self.literals[1:], strict=True):
            parts += (value, literal)
        return "".join(parts)


compile_template = lru_cache(maxsize=512)(NameTemplate)
