"""A test-only domain app: one task table, declared through ``scheduling.api`` as any app would.

The engine's own tests schedule its rows instead of a real domain app's, so they test the
engine's promises and nothing of emailer's or subscriptions'.
"""
