"""The scheduler side: the loop, the flood lanes, the publisher and the Redis fast path."""
