"""How lock names are made from values the lock's user does not control: escaping, templates
(``"pay:{order_id}"``) and their filling from a command's options. Shared by the view decorator
(distlock.views) and the command mixin (distlock.management); it uses only the lock core."""

from .escaping import DIGEST_MARK, digest, escape
from .options import fill_template, template_fields
from .templates import NameTemplate, compile_template

__all__ = [
    "DIGEST_MARK",
    "NameTemplate",
    "compile_template",
    "digest",
    "escape",
    "fill_template",
    "template_fields",
]
