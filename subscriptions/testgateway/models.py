"""The test gateway's own tables: the charges it accepted, the ones it declined, and what
it was told to do to a customer's next calls.

Each keeps the table name it had in the ``subscriptions`` app (``db_table``), so moving the
models here moved no rows (``migrations/0001_initial``).
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from subscriptions.models.validation import validate_plain_text


class GatewayCharge(models.Model):
    """The test gateway's own record of every charge it accepted (its "bank statement")."""

    reference = models.CharField(max_length=64, unique=True)
    idempotency_key = models.CharField(max_length=255, unique=True)
    customer = models.CharField(max_length=100)
    amount = models.DecimalField(max_digits=20, decimal_places=5)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "subscriptions_gatewaycharge"

    def __str__(self) -> str:
        return f"charge {self.reference} {self.amount} ({self.customer})"


class GatewayDecline(models.Model):
    """The test gateway's record of every charge it declined, by idempotency key: what its
    ``find_charge`` answers for a key that has no accepted charge (a real gateway keeps the
    same, as a failed payment)."""

    idempotency_key = models.CharField(max_length=255)
    customer = models.CharField(max_length=100)
    amount = models.DecimalField(max_digits=20, decimal_places=5)
    reason = models.CharField(max_length=255)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "subscriptions_gatewaydecline"
        indexes = [
            # find_charge: the latest decline of a key that has no accepted charge.
            models.Index(fields=["idempotency_key", "-created_at"], name="gatewaydecline_key"),
        ]

    def __str__(self) -> str:
        return f"decline {self.amount} ({self.customer}): {self.reason}"


#: The most calls the test gateway can be told to decline or fail in a row.
MAX_SCRIPTED = 10_000


class GatewayScript(models.Model):
    """What the test gateway does to one customer's next calls: decline N, or fail N."""

    customer = models.CharField(max_length=100, unique=True, validators=[validate_plain_text])
    declines_left = models.IntegerField(default=0)
    errors_left = models.IntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "subscriptions_gatewayscript"
        constraints = [
            models.CheckConstraint(
                condition=Q(declines_left__gte=0) & Q(errors_left__gte=0),
                name="gatewayscript_counts_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.customer}: decline {self.declines_left}, error {self.errors_left}"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        for field in ("declines_left", "errors_left"):
            value = getattr(self, field)
            if value is None:
                continue
            if value < 0:
                errors[field] = f"{value} is negative"
            elif value > MAX_SCRIPTED:
                errors[field] = f"{value} is more than {MAX_SCRIPTED:,} calls"
        if errors:
            raise ValidationError(errors)
