"""Business-driven sources and what a run reads of its sources: readings, listings, arrivals of partitions."""
