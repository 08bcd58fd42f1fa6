from django.apps import AppConfig


class FencingAppConfig(AppConfig):
    name = "devkit.fencingapp"
    label = "fencingapp"
    default_auto_field = "django.db.models.BigAutoField"
