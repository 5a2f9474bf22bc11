"""Signals a project can connect to, to watch renewals as they go.

``renewal_step_done`` is sent after one renewal step's writes have committed, once per step for
the whole chunk of jobs that reached it: ``step`` is the ``JobStep`` value just done
(``create_order`` or ``charge``), ``jobs`` the ``SubscriptionJob`` rows in it. A receiver runs in
the worker, inside the renewal, between two steps: it may count, trace or log, and anything it
raises is logged and ignored (``send_robust``), so the renewal goes on. The crash tests use it to
stop a renewal between its steps (tests/subscriptions/pausing.py).
"""

from __future__ import annotations

from django.dispatch import Signal

renewal_step_done = Signal()
