"""Sources: business-driven sources, sources read through their own change log (ledgers, change feeds), and what a run reads of its sources: readings, listings, arrivals of partitions."""
