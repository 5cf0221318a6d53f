"""Asset checks: pins, unit tests, stale partitions, incremental equals full (one op), source checks."""
