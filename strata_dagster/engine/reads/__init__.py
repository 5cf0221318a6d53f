"""Read-only answers for the CLI and Dagster: catalog, columns, explanations, partition status and staleness."""
