"""The tiers that need more than Python: on a machine without Chromium (or Java) `pytest -q`
passes, skipping the browser (or Spark) tier with one line that says how to run it; CI, which
sets STRATA_REQUIRE_BROWSER=1 and STRATA_REQUIRE_SPARK=1, fails instead; STRATA_SKIP_*=1 skips a
tier on request. Checked here without uninstalling anything: the tier runs in a pytest of its
own whose PATH holds no browser and no Java."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from strata_dagster_tests.support.browser_support import require_browser
from strata_dagster_tests.support.paths import TESTS
from strata_dagster_tests.support.spark_support import require_spark

INSTALL_BROWSER = "apt-get install -y chromium chromium-driver"
INSTALL_JAVA = "apt-get install -y openjdk-17-jre-headless"


def bare_environment(tmp_path, **extra) -> dict[str, str]:
    """This environment with a PATH that holds only Python (no chromium, chromedriver or java),
    no JAVA_HOME, and no STRATA_SKIP_* / STRATA_REQUIRE_* set."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    environment = {
        key: value
        for key, value in os.environ.items()
        if key != "JAVA_HOME" and not key.startswith(("STRATA_SKIP_", "STRATA_REQUIRE_", "PYTEST_"))
    }
    return {**environment, "PATH": str(bin_dir), **extra}


def tier(tmp_path, test: str, **extra) -> subprocess.CompletedProcess:
    """`python -m pytest -q TEST` (one process, no xdist) in that bare environment."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", str(TESTS / test)],
        cwd=TESTS.parent,
        env=bare_environment(tmp_path, **extra),
        capture_output=True,
        text=True,
        timeout=600,
    )


# -- the checks themselves ---------------------------------------------------------------------


def test_without_chromium_the_browser_tier_is_skipped_saying_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no chromium, no chromedriver
    monkeypatch.delenv("STRATA_SKIP_BROWSER", raising=False)
    monkeypatch.delenv("STRATA_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"browser tier skipped: .*{INSTALL_BROWSER}"):
        require_browser()


def test_ci_requires_the_browser_tier(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("STRATA_SKIP_BROWSER", raising=False)
    monkeypatch.setenv("STRATA_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match=INSTALL_BROWSER):
        require_browser()


def test_strata_skip_browser_skips_the_tier_explicitly(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("STRATA_SKIP_BROWSER", "1")
    monkeypatch.setenv("STRATA_REQUIRE_BROWSER", "1")  # an explicit skip wins
    with pytest.raises(pytest.skip.Exception, match="STRATA_SKIP_BROWSER=1"):
        require_browser()


def test_without_java_the_spark_tier_is_skipped_or_required(monkeypatch, tmp_path):
    pytest.importorskip("pyspark")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv("STRATA_SKIP_SPARK", raising=False)
    monkeypatch.delenv("STRATA_REQUIRE_SPARK", raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"Spark tier skipped: no Java 17 .*{INSTALL_JAVA}"):
        require_spark()
    monkeypatch.setenv("STRATA_REQUIRE_SPARK", "1")
    with pytest.raises(pytest.fail.Exception, match=INSTALL_JAVA):
        require_spark()


# -- the README's test command on a fresh machine -----------------------------------------------


def _journeys() -> int:
    """How many browser journeys the module holds (each skipped, or failed, as one)."""
    text = (Path(__file__).parent / "test_dagster_browser.py").read_text()
    return len(re.findall(r"^def test_", text, flags=re.M))


def test_a_machine_without_chromium_passes_the_browser_module_with_one_line(tmp_path):
    done = tier(tmp_path, "browser/test_dagster_browser.py")
    journeys = _journeys()
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(rf"\b{journeys} skipped\b", done.stdout), done.stdout
    lines = [line for line in done.stdout.splitlines() if "browser tier skipped" in line]
    assert len(lines) == 1 and INSTALL_BROWSER in lines[0], done.stdout
    assert f"({journeys} tests skipped)" in lines[0], done.stdout


def test_ci_fails_the_browser_module_on_a_machine_without_chromium(tmp_path):
    done = tier(tmp_path, "browser/test_dagster_browser.py", STRATA_REQUIRE_BROWSER="1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{_journeys()} errors" in done.stdout and INSTALL_BROWSER in done.stdout, done.stdout
    assert "browser tier skipped" not in done.stdout


def test_a_machine_without_java_passes_the_spark_tier_with_one_line(tmp_path):
    pytest.importorskip("pyspark")
    done = tier(tmp_path, "backends/spark/test_spark_session_reads.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" not in done.stdout and " skipped" in done.stdout, done.stdout
    lines = [line for line in done.stdout.splitlines() if "Spark tier skipped" in line]
    assert len(lines) == 1 and INSTALL_JAVA in lines[0], done.stdout
    required = tier(tmp_path, "backends/spark/test_spark_session_reads.py", STRATA_REQUIRE_SPARK="1")
    assert required.returncode == 1 and INSTALL_JAVA in required.stdout, required.stdout
