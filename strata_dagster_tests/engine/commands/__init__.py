"""Tests of engine.commands: backfill, corrections, gc, verify, model unit tests."""
