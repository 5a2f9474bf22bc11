"""The subscription's pages: its items (added, never changed), its latest orders and jobs,
the needs-attention filter, and the cancel and retry actions, each through one service.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from scheduling.api import ReadableTimesAdmin, admin_actor, describe_interval, instant
from subscriptions import pricing, services
from subscriptions.admin.common import (
    LATEST,
    LatestInline,
    ModelAdmin,
    amount,
    plural,
    status_text,
    step_text,
)
from subscriptions.models import (
    FAILING,
    Order,
    Subscription,
    SubscriptionItem,
    SubscriptionJob,
    SubscriptionStatus,
)


class NeedsAttentionFilter(admin.SimpleListFilter):
    """Subscriptions parked by a job that failed past its retries (Kill Bill's "parked"), and
    those whose renewal is failing and being retried (past due)."""

    title = "needs attention"
    parameter_name = "attention"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("yes", "Needs attention"),
            ("failing", "Failing (past due or needs attention)"),
            ("no", "Does not"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "yes":
            return queryset.filter(status=SubscriptionStatus.NEEDS_ATTENTION)
        if self.value() == "failing":
            return queryset.filter(status__in=FAILING)
        if self.value() == "no":
            return queryset.exclude(status=SubscriptionStatus.NEEDS_ATTENTION)
        return queryset


class ItemFormSet(forms.BaseInlineFormSet):
    """A new item is saved by ``services.add_item``: it applies from the subscription's next
    period (its first, when the subscription is being added). ``change_note`` says which,
    above the items of a saved subscription."""

    change_note = ""

    def clean(self) -> None:
        """The new items must fit the subscription (``pricing.check_items_fit``): refused
        here, on the page, rather than when they are saved."""
        super().clean()
        adding = [
            form.instance
            for form in self.extra_forms
            if form.has_changed() and form.is_valid() and not self._should_delete_form(form)
        ]
        existing = list(self.instance.items.all()) if self.instance.pk else []
        try:
            pricing.check_items_fit(existing=existing, adding=adding)
        except ValidationError as exc:
            raise ValidationError(exc.messages) from None

    def save_new(self, form: Any, commit: bool = True) -> Any:
        item = super().save_new(form, commit=False)
        return services.add_item(item=item, now=timezone.now()) if commit else item


def _period_text(subscription: Subscription, number: int) -> str:
    start = subscription.period_bounds(number)[0]
    return f"period {number}, which starts {instant(start)}"


class ItemInline(ReadableTimesAdmin, admin.TabularInline):
    model = SubscriptionItem
    formset = ItemFormSet
    template = "admin/subscriptions/edit_inline/items.html"
    extra = 1
    min_num = 1
    fields = ("sku", "quantity", "unit_price", "applies")
    readonly_fields = ("applies",)

    @admin.display(description="applies from")
    def applies(self, item: SubscriptionItem) -> str:
        if item.pk is None:
            return "the next period (above)" if item.subscription_id else "the first period"
        return _period_text(item.subscription, item.applies_from)

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        formset = super().get_formset(request, obj, **kwargs)
        if obj is not None:
            number = pricing.next_period_for_changes(subscription=obj, now=timezone.now())
            formset.change_note = (
                f"Items added now apply from the next period: {_period_text(obj, number)}. "
                "The current period's order and charge, and every earlier order, keep the "
                "items and the price they were charged with. Items are not changed or "
                "removed once the subscription exists."
            )
        return formset

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None


class OrderInline(LatestInline):
    model = Order
    fk_name = "subscription"
    extra = 0
    can_delete = False
    verbose_name_plural = f"orders (the latest {LATEST})"
    newest_first = ("-period_start", "-pk")
    fields = (
        "period_number",
        "period_start",
        "period_end",
        "amount_shown",
        "status",
        "charge_reference",
        "confirmed_at",
    )
    readonly_fields = fields
    ordering = ("period_start",)

    @admin.display(description="amount")
    def amount_shown(self, order: Order) -> str:
        return amount(order)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class JobInline(LatestInline):
    model = SubscriptionJob
    extra = 0
    can_delete = False
    verbose_name_plural = f"subscription jobs (the latest {LATEST})"
    newest_first = ("-scheduled_id",)
    fields = (
        "scheduled_id",
        "action",
        "action_date",
        "status_name",
        "step",
        "last_error",
    )
    readonly_fields = fields
    ordering = ("scheduled_id",)
    show_change_link = True

    @admin.display(description="status")
    def status_name(self, job: SubscriptionJob) -> str:
        return status_text(job)

    @admin.display(description="last step")
    def step(self, job: SubscriptionJob) -> str:
        return step_text(job.parameter)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Subscription)
class SubscriptionAdmin(ModelAdmin):
    # What decides a click; the dates are on the subscription's page.
    list_display = ("id", "customer", "status", "every", "last_error")
    list_filter = (NeedsAttentionFilter, "status")
    search_fields = ("customer",)
    inlines = (ItemInline, OrderInline, JobInline)
    actions = ("cancel_now", "cancel_at_period_end", "retry_now")
    fields = (
        "customer",
        "interval",
        "starts_at",
        "ends_at",
        "status",
        "attention_reason",
        "anchor",
        "cancelled_at",
        "skipped",
        "history",
    )

    def get_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return self.fields if obj is not None else self.fields[:-2]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # its orders would go with it: cancel it instead

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        # What a subscription is cannot change once it bills; status changes by actions.
        if obj is None:
            return ("status", "attention_reason", "anchor", "cancelled_at")
        return self.fields

    @admin.display(description="every", ordering="interval")
    def every(self, subscription: Subscription) -> str:
        return describe_interval(subscription.interval).removeprefix("every ")

    @admin.display(description="last error")
    def last_error(self, subscription: Subscription) -> str:
        reason = subscription.attention_reason
        if not reason:
            return "-"
        return format_html(
            '<span title="{}">{}</span>', reason, reason if len(reason) < 60 else reason[:59] + "…"
        )

    @admin.display(description="skipped periods")
    def skipped(self, subscription: Subscription) -> str:
        """Periods that started while it was failing: neither ordered nor charged."""
        rows = [
            (r.first_period, r.last_period, instant(r.starts_at), instant(r.ends_at), r.reason)
            for r in subscription.skipped_periods.order_by("-first_period")[:LATEST]
        ]
        if not rows:
            return "-"
        return format_html(
            '<ul class="skipped-periods">{}</ul>',
            format_html_join("", "<li>periods {} to {} ({} to {}): {}</li>", rows),
        )

    @admin.display(description="all orders and jobs")
    def history(self, subscription: Subscription) -> str:
        orders = subscription.orders.count()
        jobs = subscription.jobs.count()
        return format_html(
            '<a href="{}?subscription__id__exact={}">all {} orders</a> · '
            '<a href="{}?subscription__id__exact={}">all {} subscription jobs</a>',
            reverse("admin:subscriptions_order_changelist"),
            subscription.pk,
            orders,
            reverse("admin:subscriptions_subscriptionjob_changelist"),
            subscription.pk,
            jobs,
        )

    def save_model(self, request: HttpRequest, obj: Subscription, form: Any, change: bool) -> None:
        if not change:
            obj.anchor = obj.starts_at
        super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        if not change:
            services.start_billing(
                subscription=form.instance, now=timezone.now(), by=admin_actor(request)
            )

    def get_form(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, **kwargs)

        class WithAnchor(form):  # type: ignore[misc, valid-type]
            def _post_clean(self) -> None:
                # The anchor is the start; set before the model's clean compares them.
                if self.instance.pk is None:
                    self.instance.anchor = self.cleaned_data.get("starts_at")
                super()._post_clean()

        return WithAnchor

    def _each(self, request: HttpRequest, queryset: QuerySet[Any], verb: str, act: Any) -> None:
        """Act on each subscription; each one changed is written to the admin log."""
        done, refused = 0, []
        for subscription in queryset:
            try:
                changed = bool(act(subscription))
            except ValidationError as exc:
                refused.append(f"{subscription.pk}: {' '.join(exc.messages)}")
                continue
            if changed:
                self.log_change(request, subscription, f"{verb.capitalize()}.")
                done += 1
        self.message_user(request, f"{plural(done, 'subscription')} {verb}")
        if refused:
            self.message_user(request, "; ".join(refused), level=messages.WARNING)

    def _cancel(
        self, request: HttpRequest, queryset: QuerySet[Any], *, at_period_end: bool, verb: str
    ) -> None:
        now, by = timezone.now(), admin_actor(request)
        self._each(
            request,
            queryset,
            verb,
            lambda s: bool(
                services.cancel_subscription(
                    subscription_id=s.pk, at_period_end=at_period_end, now=now, by=by
                )
            ),
        )

    @admin.action(description="Cancel now", permissions=["change"])
    def cancel_now(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._cancel(request, queryset, at_period_end=False, verb="cancelled")

    @admin.action(description="Cancel at the end of the current period", permissions=["change"])
    def cancel_at_period_end(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._cancel(request, queryset, at_period_end=True, verb="set to cancel at period end")

    @admin.action(description="Retry failed jobs now", permissions=["change"])
    def retry_now(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        now, by = timezone.now(), admin_actor(request)
        self._each(
            request,
            queryset,
            "retried",
            lambda s: bool(services.retry_subscription_now(subscription_id=s.pk, now=now, by=by)),
        )
