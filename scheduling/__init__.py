"""Duecourse's scheduling engine: the ledger, the scheduler loop and the worker protocol."""
