"""What the engine says outside its tables: the doorbell a broker carries for an
execution, and an error as the history keeps it."""
