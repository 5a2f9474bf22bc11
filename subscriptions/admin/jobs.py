"""The subscription job's pages: only an operator's fields are editable (none on a renewal),
and a save is conditional on the optimistic counter the page was read with.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html

from scheduling.api import admin_actor, breakable, instant, row_locks
from subscriptions import services
from subscriptions.admin.common import ModelAdmin, plural, status_text, step_text, when
from subscriptions.models import StaleJob, SubscriptionJob


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
            SubscriptionJob.objects.select_for_update(**row_locks(no_key=True))
            .filter(pk=self.instance.pk)
            .values("opt_counter", "last_update")
            .first()
        )
        read = data.get("opt_counter")
        if current is not None and read is not None and current["opt_counter"] != read:
            counter, changed_at = current["opt_counter"], current["last_update"]
            raise ValidationError(
                f"This subscription job was changed at {instant(changed_at)} (by the "
                f"scheduler or another user) since this page was loaded: optimistic counter "
                f"{read}, now {counter}. Reload the page and make the change again."
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
        return status_text(job)

    @admin.display(description="last step (parameter)")
    def step(self, job: SubscriptionJob) -> str:
        return step_text(job.parameter)

    @admin.display(description="subscription", ordering="subscription_id")
    def customer(self, job: SubscriptionJob) -> str:
        return breakable(f"{job.subscription_id} ({job.subscription.customer})")

    @admin.display(description="action date", ordering="action_date")
    def due(self, job: SubscriptionJob) -> str:
        return when(job.action_date)

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
        now, by = timezone.now(), admin_actor(request)
        done, refused = 0, []
        for job in queryset:
            try:
                services.retry_job_now(job_id=job.pk, now=now, by=by)
            except ValidationError as exc:
                refused.append(" ".join(exc.messages))
                continue
            self.log_change(request, job, "Retried now.")
            done += 1
        self.message_user(request, f"{plural(done, 'job')} retried")
        if refused:
            self.message_user(request, "; ".join(refused), level=messages.WARNING)
