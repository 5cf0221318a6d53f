"""The Dagster UI in a headless browser (marker `browser`)."""
