"""mlatr serve's web page in a real browser: Debian's chromium driven by Selenium (headless).

A person's path: the page loads, they pick French, type a French query and press Enter, the results show
the clips the API ranks first with their French captions and players whose audio the browser can decode;
then they pick a sound file and get the sound's neighbours, a text file gets an error on the page; the
page fits a phone's width. Skips (with the reason) where selenium, chromium or chromedriver is missing:
``scripts/setup-system.sh`` installs the Debian packages when run as root.
"""

import shutil
import time
import urllib.parse

import pytest

pytest.importorskip("fastapi", reason="mlatr serve needs the serve extra: pip install 'mlatr[serve]'")
selenium = pytest.importorskip("selenium", reason="the browser test needs selenium (pip install 'mlatr[dev]')")

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

from mlatr.data.manifest import Manifest  # noqa: E402
from mlatr.serve.app import create_app  # noqa: E402
from mlatr.serve.live_index import LiveIndex  # noqa: E402
from servetools import request, running_server  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="needs Debian's chromium and chromium-driver packages (scripts/setup-system.sh installs them as root)")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1100,900", "--lang=en-US"]


@pytest.fixture
def browser(tmp_path):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS + [f"--user-data-dir={tmp_path / 'profile'}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver, condition, timeout=30):
    return WebDriverWait(driver, timeout).until(condition)


def test_page_search_play_and_drop_a_sound(browser, served_toy, tmp_path):
    manifest_path, _, index_path = served_toy
    manifest = Manifest.load(manifest_path)
    live = LiveIndex(index_path)
    live.reload()
    with running_server(create_app(live)) as base:
        browser.get(base + "/")
        wait(browser, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
        assert "20 sounds" in browser.find_element(By.ID, "library").text
        # pick French, type a French query, press Enter
        Select(browser.find_element(By.ID, "lang")).select_by_value("fra")
        box = browser.find_element(By.ID, "q")
        box.send_keys("un son aigu double", Keys.ENTER)
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#results .result"))
        items = browser.find_elements(By.CSS_SELECTOR, "#results .result")
        api = request(base + "/search?" + urllib.parse.urlencode({"q": "un son aigu double", "lang": "fra"})).json()
        assert len(items) == len(api["results"]) == 10
        first = api["results"][0]
        clip = manifest[[c.id for c in manifest.clips].index(first["id"])]
        assert items[0].find_element(By.CSS_SELECTOR, ".caption").text == clip.captions["fra"][0] == first["caption"]
        assert first["id"] in items[0].find_element(By.CSS_SELECTOR, ".meta").text
        # its play button's URL serves the clip's bytes, and the browser decodes them
        src = items[0].find_element(By.TAG_NAME, "audio").get_attribute("src")
        assert src == base + first["audio_url"]
        audio = request(src)
        assert audio.status == 200 and audio.body[:4] == b"RIFF"
        assert audio.body == clip.audio_path(manifest.root).read_bytes()
        duration = browser.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "const a = document.querySelector('#results audio'); a.preload = 'auto';"
            "a.addEventListener('loadedmetadata', () => done(a.duration)); a.addEventListener('error', () => done(-1));"
            "a.load();")
        assert duration == pytest.approx(first["duration"], abs=0.05)
        assert "q=un+son+aigu+double" in browser.current_url  # a link that can be shared
        # keyboard: "/" goes back to the query box
        browser.find_element(By.TAG_NAME, "body").click()
        browser.find_element(By.TAG_NAME, "body").send_keys("/")
        assert browser.switch_to.active_element.get_attribute("id") == "q"
        # search by sound: the file picker of the drop zone
        browser.find_element(By.ID, "file").send_keys(str(manifest_path.parent / "audio" / "clip007.wav"))
        wait(browser, lambda d: "clip007.wav" in d.find_element(By.ID, "status").text
             and "result" in d.find_element(By.ID, "status").text)
        assert browser.find_element(By.CSS_SELECTOR, "#results .result .meta").text.startswith("clip007")
        # a file that is not a sound: the server's message on the page
        note = tmp_path / "notes.txt"
        note.write_text("not a sound\n" * 20)
        browser.find_element(By.ID, "file").send_keys(str(note))
        wait(browser, lambda d: "error" in d.find_element(By.ID, "status").get_attribute("class"))
        assert "not a sound file" in browser.find_element(By.ID, "status").text
        # a phone's width: nothing wider than the screen
        browser.set_window_size(390, 844)
        time.sleep(0.3)
        assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
