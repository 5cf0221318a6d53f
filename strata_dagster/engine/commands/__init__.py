"""Writing commands other than a run: backfill, replay, rollback and branches, gc, verify, frames, doctor."""
