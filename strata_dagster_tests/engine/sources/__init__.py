"""Tests of engine.sources: business-driven versioning, listings, sliding windows."""
