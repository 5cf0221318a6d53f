"""SQL built as sqlglot trees, engine-neutral and with no connection: names, segments, content."""
