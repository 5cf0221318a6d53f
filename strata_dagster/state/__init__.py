"""Engine-neutral state: the history and its migrations, partition ledgers, a model's state."""
