"""Scheduled email batches: seed 000's SendEmailTask table as a task-table target."""
