"""The page's filter controls in a real browser (Debian's chromium, headless, as ``test_serve_browser``): duration
range, channels, format, library and a free filter beside the search box make one ``where`` the server ranks with
(the same clips as the API's answer to that filter; "more like this" too), live in the page's URL (a reload restores
them and the results), and a bad filter is an error on the page."""

import shutil
import urllib.parse

import pytest

pytest.importorskip("fastapi", reason="mlatr serve needs the serve extra: pip install 'mlatr[serve]'")
pytest.importorskip("selenium", reason="the browser test needs selenium (pip install 'mlatr[dev]')")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

from mlatr.serve.app import create_app  # noqa: E402
from mlatr.serve.live_index import LiveIndex  # noqa: E402
from servetools import request, running_server  # noqa: E402
from test_filtered_entries import library_with_model  # noqa: E402, F401 (a fixture)
from test_serve_browser import browser, wait  # noqa: E402, F401 (a fixture)

pytestmark = pytest.mark.skipif(
    not ((shutil.which("chromium") or shutil.which("chromium-browser")) and shutil.which("chromedriver")),
    reason="needs Debian's chromium and chromium-driver packages (scripts/setup-system.sh installs them as root)")


def _ids(driver):
    return [i.get_attribute("data-id") for i in driver.find_elements(By.CSS_SELECTOR, "#results .result")]


def test_filter_controls_make_one_where_kept_in_the_url(browser, library_with_model):  # noqa: F811
    path, _, _ = library_with_model
    live = LiveIndex(path)
    live.reload()
    with running_server(create_app(live)) as base:
        browser.get(base + "/")
        wait(browser, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
        browser.find_element(By.CSS_SELECTOR, "#filters summary").click()
        browser.find_element(By.ID, "dmax").send_keys("12.5")
        Select(browser.find_element(By.ID, "channels")).select_by_value("mono")
        Select(browser.find_element(By.ID, "format")).select_by_value("wav")
        browser.find_element(By.ID, "where").send_keys("not keywords has metal")
        browser.find_element(By.ID, "q").send_keys("rain", Keys.ENTER)
        wait(browser, lambda d: "result" in d.find_element(By.ID, "status").text)
        where = "duration<=12.5 and channels=mono and format=wav and (not keywords has metal)"
        api = request(base + "/search?" + urllib.parse.urlencode({"q": "rain", "k": 10, "where": where})).json()
        assert api["results"] and _ids(browser) == [r["id"] for r in api["results"]]
        unfiltered = request(base + "/search?" + urllib.parse.urlencode({"q": "rain", "k": 10})).json()
        assert _ids(browser) != [r["id"] for r in unfiltered["results"]]
        url = urllib.parse.parse_qs(urllib.parse.urlsplit(browser.current_url).query)
        assert url["dmax"] == ["12.5"] and url["ch"] == ["mono"] and url["fmt"] == ["wav"]
        browser.get(browser.current_url)  # a shared link: the controls and the results come back
        wait(browser, lambda d: "result" in d.find_element(By.ID, "status").text)
        assert browser.find_element(By.ID, "where").get_attribute("value") == "not keywords has metal"
        assert _ids(browser) == [r["id"] for r in api["results"]]
        # more like this from the first result: among the clips the controls allow, kept in the URL with them
        first = api["results"][0]["id"]
        browser.find_elements(By.CSS_SELECTOR, "#results .result")[0].find_element(By.CSS_SELECTOR,
                                                                                  "button.more").click()
        wait(browser, lambda d: "results for sounds like" in d.find_element(By.ID, "status").text)
        quoted = urllib.parse.quote(first, safe="")
        like = request(f"{base}/clips/similar/{quoted}?" + urllib.parse.urlencode({"k": 10, "where": where})).json()
        everyone = request(f"{base}/clips/similar/{quoted}?k=10").json()
        assert like["results"] and _ids(browser) == [r["id"] for r in like["results"]]
        assert _ids(browser) != [r["id"] for r in everyone["results"]]
        url = urllib.parse.parse_qs(urllib.parse.urlsplit(browser.current_url).query)
        assert url["like"] == [first] and url["fmt"] == ["wav"] and url["ch"] == ["mono"]
        box = browser.find_element(By.ID, "where")
        box.clear()
        box.send_keys("chanels=1", Keys.ENTER)
        wait(browser, lambda d: "unknown field" in d.find_element(By.ID, "status").text)
        assert "error" in browser.find_element(By.ID, "status").get_attribute("class")
