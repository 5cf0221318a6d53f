"""The Java the Spark tier runs on, as the tests see it (imports nothing of the tests)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def java_version() -> str | None:
    """What `java -version` prints, of `JAVA_HOME`'s Java or the PATH's (None: no Java)."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if java is None or not Path(java).exists():
        return None
    return subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
