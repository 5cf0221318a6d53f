"""What `dg dev` loads: every component under shop_dagster/defs (here, defs/strata/defs.yaml)."""

from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
