"""``manage.py subscriptions add|cancel|show|list|orders|jobs|charges|gateway script``.

Thin: parse, call one service or selector, print. Bad input is one line naming the field (and
the option that set it) with the reason, and nothing is saved. ``add`` and ``cancel`` (which
make and pause engine jobs) record them in the jobs' audit trail as ``manage.py jobs`` does:
the process's operating-system account, and the Django user ``--by USERNAME`` names.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser
from django.utils import timezone

from scheduling.api import (
    OneLineCommand,
    add_by_option,
    add_jsonl_option,
    add_window_options,
    command_line_actor,
    instant,
    parse_timing_options,
    read_window,
    text_table,
    whole_number,
    write_jsonl,
)
from subscriptions import payments, pricing, selectors, services
from subscriptions.models import OrderStatus, SubscriptionJobStatus
from subscriptions.money import format_money

#: Model fields and the option that sets them, for error messages.
OPTIONS = {
    "customer": "--customer",
    "sku": "--item",
    "item": "--item",
    "quantity": "--quantity",
    "unit_price": "--price",
    "price": "--price",
    "interval": "--every",
    "starts_at": "--start",
    "ends_at": "--end",
    "status": "--status",
    "decline": "--decline",
    "error": "--error",
    "since": "--since",
    "until": "--until",
}

#: The most orders ``orders`` lists at once (an export, ``--jsonl``, has no cap).
MOST_LISTED = 100_000


def need_test_gateway(what: str) -> None:
    """Stop with one line when ``what`` needs the test gateway and its app is not installed."""
    try:
        payments.require_test_gateway(what)
    except payments.TestGatewayNotInstalled as exc:
        raise CommandError(str(exc)) from None


def parse_int(raw: str | None, *, field: str) -> int | None:
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValidationError({field: f"{raw!r} is not a whole number"}) from None


class Command(OneLineCommand):
    help = "Create, cancel and inspect subscriptions; script the test payment gateway."
    option_names = OPTIONS

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

        def command(name: str, text: str) -> Any:
            found = sub.add_parser(name, help=text, description=text)
            found.add_argument("--json", action="store_true", help="Print one JSON value.")
            return found

        add = command("add", "Create a subscription and schedule its first renewal.")
        add.add_argument("--customer", required=True, help="Customer reference.")
        add.add_argument("--item", required=True, help="Item SKU.")
        add.add_argument("--quantity", required=True, help="Items per period (> 0).")
        add.add_argument("--price", required=True, help="Unit price, a decimal (>= 0).")
        add.add_argument("--every", required=True, help="ISO-8601 interval: P1M, P1Y, P7D, PT30S.")
        add.add_argument("--start", help="First period's start, with offset (default: now).")
        add.add_argument("--end", help="End date, with offset: then the subscription expires.")
        add_by_option(add)

        cancel = command("cancel", "Cancel a subscription now, or at the current period's end.")
        cancel.add_argument("id", help="Subscription id.")
        cancel.add_argument(
            "--at-period-end",
            action="store_true",
            help="Pending cancel: end when the current (paid) period ends.",
        )
        add_by_option(cancel)

        show = command("show", "A subscription with its orders, jobs and charges.")
        show.add_argument("id", help="Subscription id.")

        command("list", "Every subscription.")

        orders = command("orders", "Orders, newest first; or every one, oldest first (--jsonl).")
        orders.add_argument("--subscription", help="Only this subscription's orders.")
        orders.add_argument("--status", choices=OrderStatus.values, help="Only this status.")
        add_window_options(orders, of="time placed")
        orders.add_argument(
            "--limit",
            type=whole_number(1, MOST_LISTED),
            help="At most N (100); with --jsonl only when given.",
        )
        add_jsonl_option(orders)

        jobs = command("jobs", "Subscription jobs (SUBSCRSCHJOBS rows).")
        jobs.add_argument("--subscription", help="Only this subscription's jobs.")
        jobs.add_argument(
            "--status",
            help="Only jobs with this status code: "
            + ", ".join(f"{s.value} {s.label}" for s in SubscriptionJobStatus),
        )

        charges = command("charges", "Charges the test gateway accepted.")
        charges.add_argument("--subscription", help="Only this subscription's charges.")

        gateway = sub.add_parser("gateway", help="Script the test payment gateway.")
        gateway_sub = gateway.add_subparsers(dest="gateway_action", required=True)
        script = gateway_sub.add_parser(
            "script",
            help="Decline the customer's next N charges, or fail its next N calls.",
        )
        script.add_argument("customer", help="Customer reference.")
        what = script.add_mutually_exclusive_group(required=True)
        what.add_argument("--decline", help="Decline the next N charges.")
        what.add_argument("--error", help="Fail the next N calls with a gateway error.")
        script.add_argument("--json", action="store_true", help="Print one JSON value.")

    def handle(self, *args: Any, **o: Any) -> None:
        if o.get("jsonl") and o["json"]:
            raise CommandError("--jsonl: not allowed with --json")
        handler = getattr(self, f"do_{o['action']}")
        found = handler(o)
        if found is None:  # exported, line by line
            return
        data, text = found
        if o.get("json"):
            self.stdout.write(json.dumps(data, default=str))
        else:
            self.stdout.write(text)

    # --- actions ----------------------------------------------------------------------------

    def do_add(self, o: dict[str, Any]) -> tuple[Any, str]:
        now = timezone.now()
        errors: dict[str, str] = {}
        values: dict[str, Any] = {}
        for key, parse in (
            ("quantity", lambda: parse_int(o["quantity"], field="quantity")),
            ("price", lambda: pricing.parse_price(o["price"], field="price")),
        ):
            try:
                values[key] = parse()
            except ValidationError as exc:
                errors.update({k: " ".join(v) for k, v in exc.message_dict.items()})
        try:  # --start and --end read as ``jobs add`` reads them, with its refusals
            window = parse_timing_options({"start": o["start"], "end": o["end"]}, now=now)
        except ValidationError as exc:
            errors.update({k: " ".join(v) for k, v in exc.message_dict.items()})
        else:
            values["start"], values["end"] = window.get("starts_at"), window.get("ends_at")
        if errors:
            raise ValidationError(errors)
        subscription = services.create_subscription(
            customer=o["customer"],
            items=[
                pricing.ItemSpec(
                    sku=o["item"], quantity=values["quantity"], unit_price=values["price"]
                )
            ],
            interval=o["every"],
            start=values["start"],
            end=values["end"],
            now=now,
            by=command_line_actor(o["by"]),
        )
        data = selectors.subscription_detail(subscription)
        return data, self._describe(data)

    def do_cancel(self, o: dict[str, Any]) -> tuple[Any, str]:
        subscription = services.cancel_subscription(
            subscription_id=services.get_subscription(o["id"]).pk,
            at_period_end=o["at_period_end"],
            now=timezone.now(),
            by=command_line_actor(o["by"]),
        )
        data = selectors.subscription_row(subscription)
        return data, f"subscription {subscription.pk}: {subscription.status}"

    def do_show(self, o: dict[str, Any]) -> tuple[Any, str]:
        data = selectors.subscription_detail(services.get_subscription(o["id"]))
        return data, self._describe(data)

    def do_list(self, o: dict[str, Any]) -> tuple[Any, str]:
        data = [selectors.subscription_row(s) for s in selectors.subscriptions()]
        table = text_table(
            ("ID", "CUSTOMER", "STATUS", "EVERY", "FROM", "TO"),
            [
                (
                    s["id"],
                    s["customer"],
                    s["status"],
                    s["interval"],
                    _at(s["starts_at"]),
                    _at(s["ends_at"]),
                )
                for s in data
            ],
        )
        return data, table if data else "no subscriptions"

    def do_orders(self, o: dict[str, Any]) -> tuple[Any, str] | None:
        subscription_id = None
        if o["subscription"] is not None:
            subscription_id = services.get_subscription(o["subscription"]).pk
        rows = selectors.orders(
            subscription_id=subscription_id,
            status=o["status"],
            window=read_window(o["since"], o["until"], zone=timezone.get_current_timezone()),
        )
        if o["jsonl"]:
            pages = selectors.export_orders(rows, limit=o["limit"])
            write_jsonl(lambda text: self.stdout.write(text, ending=""), pages)
            return None
        newest = rows.order_by("-created_at", "-id")[: o["limit"] or 100]
        data = [selectors.order_summary(order) for order in newest]
        table = text_table(
            ("ID", "SUBSCRIPTION", "KIND", "PERIOD", "FROM", "AMOUNT", "STATUS", "PLACED"),
            [
                (
                    r["id"],
                    r["subscription_id"],
                    r["kind"],
                    r["period_number"],
                    _at(r["period_start"]),
                    format_money(r["amount"]),
                    r["status"],
                    _at(r["created_at"]),
                )
                for r in data
            ],
        )
        return data, table if data else "no orders"

    def do_jobs(self, o: dict[str, Any]) -> tuple[Any, str]:
        subscription_id = None
        if o["subscription"] is not None:
            subscription_id = services.get_subscription(o["subscription"]).pk
        status = parse_int(o["status"], field="status")
        if status is not None and status not in SubscriptionJobStatus.values:
            codes = ", ".join(f"{s.value} ({s.label})" for s in SubscriptionJobStatus)
            raise ValidationError({"status": f"{status} is not one of {codes}"})
        data = [
            selectors.job_summary(j)
            for j in selectors.jobs(subscription_id=subscription_id, status=status)
        ]
        return data, "\n".join(self._job_line(j) for j in data) or "no subscription jobs"

    def do_charges(self, o: dict[str, Any]) -> tuple[Any, str]:
        subscription_id = None
        if o["subscription"] is not None:
            subscription_id = services.get_subscription(o["subscription"]).pk
        need_test_gateway("subscriptions charges lists the test gateway's charges")
        data = selectors.gateway_charges(subscription_id=subscription_id)
        table = text_table(
            ("REFERENCE", "AMOUNT", "CUSTOMER", "IDEMPOTENCY KEY"),
            [
                (c["reference"], format_money(c["amount"]), c["customer"], c["idempotency_key"])
                for c in data
            ],
        )
        return data, table if data else "no charges"

    def do_gateway(self, o: dict[str, Any]) -> tuple[Any, str]:
        declines = parse_int(o["decline"], field="decline") or 0
        errors = parse_int(o["error"], field="error") or 0
        need_test_gateway("subscriptions gateway script scripts the test gateway")
        from subscriptions.testgateway.gateway import script_customer

        script = script_customer(customer=o["customer"], declines=declines, errors=errors)
        data = {
            "customer": script.customer,
            "declines_left": script.declines_left,
            "errors_left": script.errors_left,
        }
        return data, (
            f"test gateway: customer {script.customer}: decline the next "
            f"{script.declines_left} charges, fail the next {script.errors_left} calls"
        )

    # --- text -------------------------------------------------------------------------------

    @staticmethod
    def _job_line(j: dict[str, Any]) -> str:
        return (
            f"{j['scheduled_id']:>6} sub={j['subscription_id']:<6} {j['action']:16} "
            f"at {_at(j['action_date'])} status={j['status']} ({j['status_name']}) "
            f"parameter={j['parameter'] or '-'} retries={j['retry_count']} "
            f"opt={j['opt_counter']}"
        )

    @staticmethod
    def _order_line(r: dict[str, Any]) -> str:
        """One order; its period only where it has one (a parent order may have none)."""
        period = "" if r["period_number"] is None else f" period {r['period_number']}"
        start = f" from {_at(r['period_start'])}" if r["period_start"] else ""
        return (
            f"  order {r['id']} {r['kind']}{period}{start} {format_money(r['amount'])} "
            f"{r['status']} {r['charge_reference']}"
        ).rstrip()

    def _describe(self, data: dict[str, Any]) -> str:
        lines = [
            f"subscription {data['id']} of {data['customer']}: {data['status']}, every "
            f"{data['interval']} from {_at(data['starts_at'])} to {_at(data['ends_at'])}",
            *(
                f"  item {i['quantity']} x {i['sku']} at {format_money(i['unit_price'])}"
                for i in data["items"]
            ),
            *(self._order_line(r) for r in data["orders"]),
            *(f"  job {self._job_line(j)}" for j in data["jobs"]),
            *(
                f"  charge {c['reference']} {format_money(c['amount'])}"
                for c in data["charges"]
            ),
            *(
                f"  skipped periods {k['first_period']}-{k['last_period']} "
                f"({_at(k['starts_at'])} to {_at(k['ends_at'])}): {k['reason']}"
                for k in data["skipped"]
            ),
        ]
        if data["attention_reason"]:
            lines.append(f"  needs attention: {data['attention_reason']}")
        return "\n".join(lines)


def _at(text: str | None) -> str:
    """An ISO-8601 instant of the JSON output as the apps' one rule prints it in text."""
    return instant(datetime.fromisoformat(text)) if text else "-"
