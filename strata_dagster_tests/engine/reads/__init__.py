"""Tests of engine.reads: catalog bounds, partition staleness."""
