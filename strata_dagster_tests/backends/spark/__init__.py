"""Tests of the Spark backend and its dialect (marker `spark`)."""
