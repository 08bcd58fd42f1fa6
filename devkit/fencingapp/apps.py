from django.apps import AppConfig


class FencingAppConfig(AppConfig):
    name = "tests.support.fencingapp"
    label = "fencingapp"
    default_auto_field = "django.db.models.BigAutoField"
