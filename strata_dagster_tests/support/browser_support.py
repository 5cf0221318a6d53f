"""Headless Chromium (Debian's `chromium` and `chromium-driver`) driven by selenium against a
`dagster dev` on 127.0.0.1: explicit waits on what a person sees (text, buttons, dialogs), never
sleeps, and a screenshot of the page when a journey fails."""

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = "chromedriver"
INSTALL = "apt-get install -y chromium chromium-driver && pip install selenium (or pip install -e '.[test]')"
# Without these, Chromium reaches for the network (updates, sync, QUIC probes), which is closed here.
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1600,1000",
)
WAIT = 90  # seconds: the UI on 2 busy cores takes a while to load a page


SKIP_ENV = "STRATA_SKIP_BROWSER"
REQUIRE_ENV = "STRATA_REQUIRE_BROWSER"  # .ci/run sets it: there a missing browser fails the tier
SKIPPED = "browser tier skipped: "  # conftest sums these skips up in one line


def require_browser() -> tuple[str, str]:
    """The Chromium and chromedriver binaries. Without them (or selenium) the tier is skipped,
    saying how to install them, unless STRATA_REQUIRE_BROWSER=1 (CI) makes that a failure;
    STRATA_SKIP_BROWSER=1 skips it on request."""
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIPPED}{SKIP_ENV}=1 asks so")
    browser = next((found for name in CHROMIUM if (found := shutil.which(name))), None)
    driver = shutil.which(DRIVER)
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing = "selenium"
    else:
        missing = None if browser and driver else "headless Chromium and its driver"
    if missing is not None:
        found = f"found browser={browser}, chromedriver={driver}"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(
                f"the browser tier needs {missing} ({found}): {INSTALL} ({REQUIRE_ENV}=1 requires the tier)"
            )
        pytest.skip(f"{SKIPPED}no {missing} on this machine ({found}); to run it: {INSTALL}")
    assert browser is not None and driver is not None
    return browser, driver


@contextmanager
def chromium(user_data: Path) -> Iterator["Page"]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = require_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (*FLAGS, f"--user-data-dir={user_data}"):
        options.add_argument(flag)
    # An explicit driver path: selenium's own driver manager would try to download one.
    session = webdriver.Chrome(options=options, service=Service(driver))
    try:
        yield Page(session)
    finally:
        session.quit()


class Page:
    """The browser's page, read and clicked the way a person does, by visible text and labels."""

    def __init__(self, driver) -> None:
        self.driver = driver

    def open(self, url: str) -> None:
        self.driver.get(url)

    def _wait(self, timeout: float):
        from selenium.common.exceptions import (
            ElementClickInterceptedException,
            ElementNotInteractableException,
            StaleElementReferenceException,
        )
        from selenium.webdriver.support.ui import WebDriverWait

        # React re-renders replace elements under our hands and overlays fade out: try again.
        ignored = (
            StaleElementReferenceException,
            ElementClickInterceptedException,
            ElementNotInteractableException,
        )
        return WebDriverWait(self.driver, timeout, ignored_exceptions=ignored)

    def see(self, xpath: str, timeout: float = WAIT):
        """The first visible element at `xpath`, once there is one."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as ec

        return self._wait(timeout).until(ec.visibility_of_element_located((By.XPATH, xpath)), xpath)

    def see_text(self, text: str, within: str = "", timeout: float = WAIT):
        """An element showing exactly `text` (whitespace normalised), optionally inside `within`."""
        return self.see(f"{within}//*[normalize-space()={xpath_literal(text)}]", timeout)

    def click(self, xpath: str, timeout: float = WAIT) -> None:
        from selenium.webdriver.common.by import By

        def clicked(driver) -> bool:
            for element in driver.find_elements(By.XPATH, xpath):
                if element.is_displayed() and element.is_enabled():
                    element.click()
                    return True
            return False

        self._wait(timeout).until(clicked, f"a clickable {xpath}")

    def click_button(self, label: str, within: str = "", timeout: float = WAIT) -> None:
        self.click(f"{within}//button[normalize-space()={xpath_literal(label)}]", timeout)

    def type_into(self, xpath: str, text: str, *, leave: bool = False) -> None:
        """Type `text` into the field at `xpath`; `leave` tabs out of it, as inputs that apply
        their value on blur need."""
        from selenium.webdriver.common.keys import Keys

        def typed(page: "Page") -> bool:
            # A dialog still loading can drop the keys (or re-render the field): type them again.
            field = page.see(xpath)
            if field.get_attribute("value") != text:
                field.clear()
                field.send_keys(text)
            return field.get_attribute("value") == text

        self.until(typed, f"`{text}` typed into {xpath}")
        if leave:
            self.see(xpath).send_keys(Keys.TAB)

    def until(self, predicate, what: str, timeout: float = WAIT):
        """Wait for `predicate(page)` to be true (a condition on what the page shows)."""
        return self._wait(timeout).until(lambda _driver: predicate(self), what)

    def body_text(self) -> str:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.TAG_NAME, "body").text

    def screenshot(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(path))
        return path


def xpath_literal(text: str) -> str:
    assert "'" not in text, text  # the journeys' texts never hold one; XPath 1.0 has no escape
    return f"'{text}'"


DIALOG = "//*[@role='dialog']"


def fresh_profile() -> Path:
    return Path(tempfile.mkdtemp(prefix="strata-chromium-"))
