"""Management command support: ``LockedCommandMixin`` runs a command once across hosts."""

from .mixin import LockedCommandMixin, LockSkipped

__all__ = ["LockSkipped", "LockedCommandMixin"]
