"""The browser tier never skips silently: without Chromium it fails saying how to install it,
and only STRATA_SKIP_BROWSER=1 skips it."""

import pytest

from strata_dagster_tests.browser_support import require_browser


def test_a_machine_without_chromium_fails_the_browser_tier_with_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no chromium, no chromedriver
    monkeypatch.delenv("STRATA_SKIP_BROWSER", raising=False)
    with pytest.raises(pytest.fail.Exception, match="apt-get install -y chromium chromium-driver"):
        require_browser()


def test_strata_skip_browser_skips_the_tier_explicitly(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("STRATA_SKIP_BROWSER", "1")
    with pytest.raises(pytest.skip.Exception, match="STRATA_SKIP_BROWSER=1"):
        require_browser()
