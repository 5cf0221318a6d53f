"""Build strategies: each writes a model's new snapshot or segment, and never publishes it."""
