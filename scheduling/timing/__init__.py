"""When jobs fire: the timing values of the API, the schedules' rules, and cron."""
