"""Lock names filled in from option values: ``"send-digest:{tenant}"``.

The same rules as ``@lock_view``'s request values (distlock.naming): each value is
percent-encoded, so it can never add a separator, a brace or a field of its own, fields must
be separated by literal text, and a name that would be too long has its long values replaced
by a digest. Only the template (written by a programmer) can make the name invalid.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..keys import validate_name
from .escaping import DIGEST_MARK, escape
from .templates import compile_template

__all__ = ["DIGEST_MARK", "fill_template", "template_fields"]


def template_fields(template: str) -> list[str]:
    """Return the field names of ``template`` in order; raise ValueError if one is not a
    plain name (``{0}``, ``{a.b}``, ``{a[0]}``, ``{a!r}``, ``{a:>5}`` are refused)."""
    compiled = compile_template(template)
    for field in compiled.fields:
        if field.source != "kwarg" or field.attributes or field.spec or field.conversion:
            raise ValueError(
                f"Lock name template {template!r} has the field {field.text}; use plain "
                "names such as {tenant}, without attributes, indexes or format specs."
            )
    return [str(field.key) for field in compiled.fields]


def fill_template(template: str, values: Mapping[str, object]) -> str:
    """Return the lock name ``template`` with its fields replaced by escaped ``values``.

    Raise KeyError naming the first field missing from ``values``, ValueError for a field
    that is not a plain name or fields not separated by literal text, InvalidLockName if the
    template's own text is unusable.
    """
    escaped = [escape(values[field]) for field in template_fields(template)]
    return validate_name(compile_template(template).join(escaped))
