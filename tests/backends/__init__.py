"""Tests of the backends and what they store: the Redis layout, Cluster, Sentinel, Redlock,
servers that are down, redis-py's public API."""
