"""What users type (customer, item SKU, a parked subscription's reason) is shown escaped."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.urls import reverse
from django.utils.html import escape

from subscriptions import pricing
from subscriptions.models import Subscription, SubscriptionJob, SubscriptionStatus

pytestmark = pytest.mark.django_db

SCRIPT = "<script>alert(1)</script>"
ATTRIBUTE = '"><img src=x onerror=alert(1)>'


def assert_shown_escaped(html: str, *payloads: str) -> None:
    for payload in payloads:
        assert payload not in html, f"{payload!r} reached the page unescaped"
        assert escape(payload) in html, f"{payload!r} is not shown at all"


def test_typed_fields_are_shown_escaped_on_the_subscription_pages(
    admin_client: Any, make_subscription: Any
) -> None:
    subscription = make_subscription(
        customer=SCRIPT[:40], items=[pricing.ItemSpec(ATTRIBUTE, 1, Decimal("1.00"))]
    )
    Subscription.objects.filter(pk=subscription.pk).update(
        status=SubscriptionStatus.NEEDS_ATTENTION, attention_reason=ATTRIBUTE + SCRIPT
    )
    job = SubscriptionJob.objects.filter(subscription=subscription).first()

    for url, payloads in (
        (reverse("admin:subscriptions_subscription_changelist"), (SCRIPT[:40],)),
        (
            reverse("admin:subscriptions_subscription_change", args=[subscription.pk]),
            (SCRIPT[:40], ATTRIBUTE, SCRIPT),
        ),
        (reverse("admin:subscriptions_subscriptionjob_changelist"), ()),
        (reverse("admin:subscriptions_subscriptionjob_change", args=[job.pk]), ()),
    ):
        response = admin_client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert SCRIPT not in html and ATTRIBUTE not in html, url
        assert_shown_escaped(html, *payloads)
