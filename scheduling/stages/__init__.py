"""The stages that decide: claim, attempt, publish, liveness, limits, retention, ticks, the
job lifecycle and the reads the processes share. The statements they run live in ``ledger``."""
