"""The test gateway: a payment gateway that takes no money, for demos and tests.

An optional app beside ``subscriptions``: a host lists ``"subscriptions.testgateway"`` in
``INSTALLED_APPS`` where it wants the test gateway (a demo, a staging site, its tests) and
leaves it out in production, which then has neither its tables' models nor its admin pages.
``SUBSCRIPTIONS_GATEWAY`` names its class, ``subscriptions.testgateway.gateway.TestGateway``
(the default); ``manage.py check`` says so (``subscriptions.E008``) when that setting names it
while this app is not installed.

Its tables keep the names they had when they belonged to ``subscriptions`` (``db_table``), and
its first migration takes them over where they exist, so a database that had scripted
declines keeps them when the host adds this app.

- ``models``: ``GatewayCharge``, ``GatewayDecline``, ``GatewayScript``;
- ``gateway``: ``TestGateway`` and ``script_customer``;
- ``ledger``: its charge in one round trip, on each database;
- ``selectors``: its charges as the command line prints them;
- ``admin``: its pages.
"""
