"""Assets: sources (observable), the SQL models (one multi-asset per partitioning), Python models,
partitions and the partitions companions."""
