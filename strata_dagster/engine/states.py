"""A model's state: the head snapshot record and the segments it stands for (state.states,
which every engine also uses to repoint views)."""

from strata_dagster.state.states import grain_of, merge_keys_of, segments_of, state_query, state_tables

__all__ = ["grain_of", "merge_keys_of", "segments_of", "state_query", "state_tables"]
