"""A headless chromium for the page's tests: Debian's chromium and chromium-driver, driven by Selenium.

Skips (with the reason) where selenium, chromium or chromedriver is missing: ``scripts/setup-system.sh``
installs the Debian packages when run as root.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
MISSING = "needs Debian's chromium and chromium-driver packages (scripts/setup-system.sh installs them as root)"

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1100,900", "--lang=en-US"]


def start_chromium(profile: Path, *flags: str):
    """A headless chromium with its own ``profile`` folder and :data:`FLAGS` plus ``flags``; the caller quits it.
    Skips the test where selenium, chromium or its driver is missing."""
    pytest.importorskip("selenium", reason="the browser tests need selenium (pip install 'mlatr[dev]')")
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip(MISSING)
    # selenium is an optional (dev) dependency: imported once a test needs a browser
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, *flags, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    return driver
