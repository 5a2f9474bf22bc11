"""The admin: subscriptions with their orders and jobs, subscription jobs, the test gateway.

Actions call one service per row and report counts. Ledgers (orders, the gateway's charges)
are read-only for everyone, superusers included: no page adds, changes or deletes them, and
no subscription is deleted, since that would delete its orders. A subscription job offers only
the fields an operator may edit (``models.OPERATOR_FIELDS``: none on a renewal); its form
carries the optimistic counter it was read with, and saving it is conditional on that counter,
so an edit that raced the scheduler is refused with the reason instead of overwriting the
run's state.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import ValidationError
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from scheduling.api import ContentSecurityPolicyAdmin, ago, describe_interval, instant
from subscriptions import services
from subscriptions.models import (
    FAILING,
    DueBatch,
    GatewayCharge,
    GatewayDecline,
    GatewayScript,
    JobStep,
    Order,
    StaleJob,
    Subscription,
    SubscriptionItem,
    SubscriptionJob,
    SubscriptionJobStatus,
    SubscriptionStatus,
)

#: How many of a subscription's orders and jobs its page shows; the rest are a link away.
LATEST = 20


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _when(moment: Any) -> str:
    """A time as the engine's pages show it: relative, with the exact instant on hover."""
    if moment is None:
        return "-"
    return format_html('<span title="{}">{}</span>', instant(moment), ago(moment, timezone.now()))


def _status(job: SubscriptionJob) -> str:
    label = f"{job.status} {SubscriptionJobStatus(job.status).label}"
    return f"{label} (retry {job.retry_count})" if job.retry_count else label


class LatestInline(admin.TabularInline):
    """Only the subscription's latest ``LATEST`` rows; ``SubscriptionAdmin`` links to the rest."""

    newest_first: tuple[str, ...] = ("-pk",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        rows = super().get_queryset(request)
        match = request.resolver_match
        parent = match.kwargs.get("object_id") if match else None
        if parent is None:
            return rows
        latest = list(
            rows.filter(subscription_id=parent)
            .order_by(*self.newest_first)
            .values_list("pk", flat=True)[:LATEST]
        )
        return rows.filter(pk__in=latest)


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
        """The new items must fit the subscription (``services.check_items_fit``): refused
        here, on the page, rather than when they are saved."""
        super().clean()
        adding = [
            form.instance
            for form in self.extra_forms
            if form.has_changed() and form.is_valid() and not self._should_delete_form(form)
        ]
        existing = list(self.instance.items.all()) if self.instance.pk else []
        try:
            services.check_items_fit(existing=existing, adding=adding)
        except ValidationError as exc:
            raise ValidationError(exc.messages) from None

    def save_new(self, form: Any, commit: bool = True) -> Any:
        item = super().save_new(form, commit=False)
        return services.add_item(item=item, now=timezone.now()) if commit else item


def _period_text(subscription: Subscription, number: int) -> str:
    start = subscription.period_bounds(number)[0]
    return f"period {number}, which starts {start:%Y-%m-%d %H:%M} UTC"


class ItemInline(admin.TabularInline):
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
            number = services.next_period_for_changes(subscription=obj, now=timezone.now())
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
        "amount",
        "status",
        "charge_reference",
        "confirmed_at",
    )
    readonly_fields = fields
    ordering = ("period_start",)

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
        return _status(job)

    @admin.display(description="last step")
    def step(self, job: SubscriptionJob) -> str:
        return _step(job.parameter)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _step(parameter: str) -> str:
    try:
        return str(JobStep(parameter).label)
    except ValueError:  # a value written by hand or by an import
        return parameter


class ModelAdmin(ContentSecurityPolicyAdmin, admin.ModelAdmin):
    """Every page of this app: a list action posted with a selection that holds something
    other than ids (a hand-made POST) is refused with a message and changes nothing, where
    Django would filter by it as it came and answer 500."""

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> Any:
        pk = self.model._meta.pk
        try:
            for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
                pk.to_python(value)
        except ValidationError:
            self.message_user(
                request,
                "The selection holds values that are not ids; nothing was done.",
                level=messages.WARNING,
            )
            return None  # Django redirects back to the list
        return super().response_action(request, queryset, *args, **kwargs)


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
            services.start_billing(subscription=form.instance, now=timezone.now())

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
        self.message_user(request, f"{_plural(done, 'subscription')} {verb}")
        if refused:
            self.message_user(request, "; ".join(refused), level=messages.WARNING)

    def _cancel(
        self, request: HttpRequest, queryset: QuerySet[Any], *, at_period_end: bool, verb: str
    ) -> None:
        now = timezone.now()
        self._each(
            request,
            queryset,
            verb,
            lambda s: bool(
                services.cancel_subscription(
                    subscription_id=s.pk, at_period_end=at_period_end, now=now
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
        now = timezone.now()
        self._each(
            request,
            queryset,
            "retried",
            lambda s: bool(services.retry_subscription_now(subscription_id=s.pk, now=now)),
        )


class SubscriptionJobForm(forms.ModelForm):
    """Carries the counter the page was rendered with; a save is conditional on it. The
    fields beside it are the job's operator fields (``SubscriptionJobAdmin.get_fields``)."""

    opt_counter = forms.IntegerField(widget=forms.HiddenInput)

    class Meta:
        model = SubscriptionJob
        fields = ("opt_counter",)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.instance.pk is None:
            return data
        # The admin's change view is one transaction: the row stays locked until the save.
        current = (
            SubscriptionJob.objects.select_for_update(no_key=True)
            .filter(pk=self.instance.pk)
            .values_list("opt_counter", "last_update")
            .first()
        )
        read = data.get("opt_counter")
        if current is not None and read is not None and current[0] != read:
            raise ValidationError(
                f"This subscription job was changed at {current[1].isoformat()} (by the "
                f"scheduler or another user) since this page was loaded: optimistic counter "
                f"{read}, now {current[0]}. Reload the page and make the change again."
            )
        return data


@admin.register(SubscriptionJob)
class SubscriptionJobAdmin(ModelAdmin):
    form = SubscriptionJobForm
    # What decides a click; the step, the counter and the batch are on the job's page.
    list_display = ("scheduled_id", "customer", "action", "due", "status_name", "error")
    list_filter = ("status", "action")
    search_fields = ("subscription__customer",)
    list_select_related = ("subscription",)
    actions = ("retry_now",)
    #: Every column, in the seed's order; only a job's operator fields are editable.
    shown = (
        "scheduled_id",
        "subscription",
        "action",
        "action_date",
        "status_name",
        "time_placed",
        "last_update",
        "retry_count",
        "last_error",
        "batch",
        "step",
        "custom_integer",
        "custom_decimal",  # a copy of the order's amount; the charge never reads it
        "custom_text",
    )

    def get_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        if obj is not None and obj.operator_fields():
            return (*self.shown, "opt_counter")
        return self.shown

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        editable = obj.operator_fields() if obj is not None else ()
        return tuple(name for name in self.shown if name not in editable)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and not obj.operator_fields():
            return False  # a renewal: nothing on it is edited by hand (its page is a view)
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a job is stopped by cancelling its subscription, never deleted

    @admin.display(description="status", ordering="status")
    def status_name(self, job: SubscriptionJob) -> str:
        return _status(job)

    @admin.display(description="last step (parameter)")
    def step(self, job: SubscriptionJob) -> str:
        return _step(job.parameter)

    @admin.display(description="subscription", ordering="subscription_id")
    def customer(self, job: SubscriptionJob) -> str:
        return f"{job.subscription_id} ({job.subscription.customer})"

    @admin.display(description="action date", ordering="action_date")
    def due(self, job: SubscriptionJob) -> str:
        return _when(job.action_date)

    @admin.display(description="last error")
    def error(self, job: SubscriptionJob) -> str:
        text = job.last_error
        if not text:
            return "-"
        return format_html(
            '<span title="{}">{}</span>', text, text if len(text) < 50 else text[:49] + "…"
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # jobs are placed by subscriptions, never by hand

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        values = {name: form.cleaned_data[name] for name in obj.operator_fields()}
        try:
            services.edit_job(job=obj, values=values, now=timezone.now())
        except StaleJob as exc:  # lost a race after the form was checked
            self.message_user(request, str(exc), level=messages.ERROR)

    @admin.action(description="Retry now (failed jobs)", permissions=["change"])
    def retry_now(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        now = timezone.now()
        done, refused = 0, []
        for job in queryset:
            try:
                services.retry_job_now(job_id=job.pk, now=now)
            except ValidationError as exc:
                refused.append(" ".join(exc.messages))
                continue
            self.log_change(request, job, "Retried now.")
            done += 1
        self.message_user(request, f"{_plural(done, 'job')} retried")
        if refused:
            self.message_user(request, "; ".join(refused), level=messages.WARNING)


class ReadOnlyAdmin(ModelAdmin):
    """Rows that only the app's own services write: the admin shows them and changes nothing,
    for superusers too (these answer before Django's superuser shortcut), so no add, change or
    delete page and no delete action exists for them. Only history retention removes a
    ledger's rows."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Order)
class OrderAdmin(ReadOnlyAdmin):
    """Read-only: orders are written by subscriptions and their renewals."""

    list_display = ("id", "subscription_id", "period_number", "period", "amount", "status")
    list_filter = ("status",)
    search_fields = ("subscription__customer", "charge_reference")
    ordering = ("-created_at", "-pk")

    @admin.display(description="period", ordering="period_start")
    def period(self, order: Order) -> str:
        return _when(order.period_start)


class BoundedDates(ChangeList):
    """Django reads a date drill-down (``?due_at__year=…``) with ``int()`` and builds a date
    from it; a year of twenty digits overflows instead of failing as a bad parameter. Here it
    is one, which Django answers with the unfiltered list (``?e=1``), as for ``year=abc``."""

    def get_filters(self, request: HttpRequest) -> Any:
        try:
            return super().get_filters(request)
        except OverflowError as exc:
            raise IncorrectLookupParameters(exc) from exc


@admin.register(DueBatch)
class DueBatchAdmin(ReadOnlyAdmin):
    """Read-only: the batches whose engine jobs run subscription jobs (the engine's Jobs
    page shows each batch's runs as ``subscriptions.DueBatch:<id>``)."""

    list_display = ("id", "due", "block", "job_count", "closed")
    list_filter = (("closed_at", admin.EmptyFieldListFilter),)
    date_hierarchy = "due_at"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).annotate(job_count=Count("jobs"))

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return BoundedDates

    @admin.display(description="jobs", ordering="job_count")
    def job_count(self, batch: Any) -> int:
        return int(batch.job_count)

    @admin.display(description="due", ordering="due_at")
    def due(self, batch: DueBatch) -> str:
        return _when(batch.due_at)

    @admin.display(description="closed", ordering="closed_at")
    def closed(self, batch: DueBatch) -> str:
        return _when(batch.closed_at)


@admin.register(GatewayCharge)
class GatewayChargeAdmin(ReadOnlyAdmin):
    """The test gateway's record of charges: read-only, as a bank statement is."""

    list_display = ("reference", "customer", "amount", "idempotency_key", "created_at")
    search_fields = ("customer", "idempotency_key", "reference")


@admin.register(GatewayDecline)
class GatewayDeclineAdmin(ReadOnlyAdmin):
    """The test gateway's record of declined charges: read-only, as its charges are."""

    list_display = ("idempotency_key", "customer", "amount", "reason", "created_at")
    search_fields = ("customer", "idempotency_key")


@admin.register(GatewayScript)
class GatewayScriptAdmin(ModelAdmin):
    list_display = ("customer", "declines_left", "errors_left", "updated_at")
