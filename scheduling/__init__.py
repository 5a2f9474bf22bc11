"""Duecourse's scheduling engine: the ledger, the scheduler loop and the worker protocol."""

#: The one place the version is written; the package metadata reads it from here.
__version__ = "0.2.0"
