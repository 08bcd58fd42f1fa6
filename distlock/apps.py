from django.apps import AppConfig


class DistlockConfig(AppConfig):
    name = "distlock"
    verbose_name = "Distlock"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the system checks
        from .claims import install as install_claims
        from .transactions import install

        install()  # watch the ends of database transactions (idempotent)
        install_claims()  # fence=True: claim tokens in each transaction (idempotent)
