"""What both SQL backends share on purpose: the session methods written once over sqlglot trees."""
