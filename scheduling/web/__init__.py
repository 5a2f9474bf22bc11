"""The operators' web: the admin, the dashboard, ``/health/`` and ``/metrics``, and their reads."""
