"""IO: the StrataIOManager (Python models written, models read as frames) and frame types."""
