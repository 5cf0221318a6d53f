"""The Dagster path's fixed cost that is ours: a run worker imports the definitions' modules, and
those leave the frame libraries (pandas, polars, pyarrow) unloaded until a frame is read or written."""

import subprocess
import sys

PROBE = """
import sys
import strata_dagster.orchestration
print(sorted(name for name in ("pandas", "polars", "pyarrow") if name in sys.modules))
"""


def test_loading_the_dagster_layer_does_not_import_frame_libraries():
    found = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"
