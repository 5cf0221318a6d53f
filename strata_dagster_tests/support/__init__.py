"""Helpers the tests share (fixtures' builders, drivers run as subprocesses, Spark and Java set-up); no tests."""
