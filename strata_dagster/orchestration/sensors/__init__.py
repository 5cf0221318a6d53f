"""Sensors: the stale sensor (`strata_materialize_stale`) and declarative automation."""
