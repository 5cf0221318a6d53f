"""Tests of strata_dagster.sql, the SQL builders."""
