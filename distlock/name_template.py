"""The old import path of ``fill_template``, kept working: it lives in distlock.naming
(``from distlock.naming import fill_template``)."""
from .naming import DIGEST_MARK, fill_template, template_fields

__all__ = ["DIGEST_MARK", "fill_template", "template_fields"]
