"""The test settings without the test gateway's app: a host that left it out (production)."""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "subscriptions.testgateway"]
