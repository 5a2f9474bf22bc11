"""Deployment files: the one-machine topology (``Procfile``, ``topology.py``) and compose file."""
