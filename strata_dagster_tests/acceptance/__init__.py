"""Acceptance tests: whole journeys on each backend, crashes at each write step."""
