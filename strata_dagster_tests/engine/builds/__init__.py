"""Tests of engine.builds: each build strategy against a full rebuild."""
