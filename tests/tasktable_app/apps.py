from django.apps import AppConfig


class TaskTableAppConfig(AppConfig):
    name = "tests.tasktable_app"
    label = "tasktable_app"
    default_auto_field = "django.db.models.BigAutoField"
