"""The Dagster path's fixed cost that is ours: a run worker imports the definitions' modules, and
those leave the frame libraries (pandas, polars, pyarrow) unloaded until a frame is read or written,
the example's definitions (with its polars model) included."""

import subprocess
import sys

from strata_dagster_tests.support.dagster_support import example_workspace

FRAMES = 'print(sorted(name for name in ("pandas", "polars", "pyarrow") if name in sys.modules))'
PROBE = f"""
import sys
import strata_dagster.orchestration
{FRAMES}
"""


def test_loading_the_dagster_layer_does_not_import_frame_libraries():
    found = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"


def test_loading_the_examples_definitions_does_not_import_frame_libraries(tmp_path):
    project, _, _ = example_workspace(tmp_path)
    probe = (
        f"import runpy, sys\ndefs = runpy.run_path({str(project / 'definitions.py')!r})['defs']\n{FRAMES}\n"
    )
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert found.stdout.strip().splitlines()[-1] == "[]"
