"""The engine: runs, history, rollback, branches, gc, replay (no dagster, no click here)."""
