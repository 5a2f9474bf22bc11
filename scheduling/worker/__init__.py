"""The worker side: the schedulable task base, an attempt's start and end, the heartbeat
thread and the Celery signal receivers that write the history."""
