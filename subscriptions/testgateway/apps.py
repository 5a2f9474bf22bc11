from django.apps import AppConfig


class TestGatewayConfig(AppConfig):
    """The test gateway's app; its label keeps it apart from ``subscriptions`` in the admin,
    the permissions and the migrations."""

    name = "subscriptions.testgateway"
    label = "subscriptions_testgateway"
    verbose_name = "Subscriptions: test gateway"
    # The tables it takes over from subscriptions were made with 64-bit ids, whatever the
    # host's DEFAULT_AUTO_FIELD.
    default_auto_field = "django.db.models.BigAutoField"
