"""Per-subscription scheduled jobs (seed 002): create the next child order, cancel, expire."""
