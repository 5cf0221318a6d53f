"""Names and limits `strata --help` shows (backends, STRATA_* variables, the default branch), defined
below every layer so that printing the help imports none of the layers that use them."""

from __future__ import annotations

from typing import Final, Literal, get_args

BackendName = Literal["duckdb", "spark"]
BACKEND_NAMES: Final[tuple[str, ...]] = get_args(BackendName)
BACKEND_ENV: Final = "STRATA_BACKEND"
# The former name of STRATA_BACKEND, still read when STRATA_BACKEND is unset.
ENGINE_ENV: Final = "STRATA_ENGINE"
SPARK_REMOTE_ENV: Final = "STRATA_SPARK_REMOTE"
WAREHOUSE_ENV: Final = "STRATA_WAREHOUSE"
DEFAULT_BRANCH: Final = "main"
# Ten times what the benchmarks use: beyond it a typo (an extra zero or three) fills the disk.
MAX_SAMPLE_ROWS: Final = 100_000_000
