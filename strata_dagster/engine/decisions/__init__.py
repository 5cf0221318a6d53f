"""What a run decides for each model, read-only: `strata run` executes it, `strata plan` tells it."""
