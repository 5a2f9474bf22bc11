"""How an amount of money reads: with the currency's decimals, in one place.

Prices, orders and charges are stored with five decimals (``DecimalField(decimal_places=5)``),
so a unit price of a fraction of a cent can be kept exactly; shown as stored, every amount
read ``12.50000``. The admin's columns and the ``subscriptions`` command's text show amounts
through ``format_money``: the currency's decimals (``SUBSCRIPTIONS_CURRENCY_DECIMALS``, 2),
and more only where the amount has significant digits beyond them, so rounding hides nothing.
``--json`` keeps the stored value.
"""

from __future__ import annotations

from decimal import Decimal

from subscriptions import conf


def format_money(value: Decimal | str | None) -> str:
    """``value`` with the currency's decimals (more only when it has them); "-" for None."""
    if value is None:
        return "-"
    amount = Decimal(value)
    places = conf.currency_decimals()
    shown = amount.quantize(Decimal(1).scaleb(-places))
    if shown != amount:  # significant digits past the currency's: keep them, trailing zeros off
        shown = amount.normalize()
    return f"{shown:f}"
