"""Jobs and their schedules: asset jobs, backfill jobs, one-run jobs, the gc job; the executor."""
