"""mlatr serve's web page in a real browser: Debian's chromium driven by Selenium (headless).

A person's path: the page loads, they pick French, type a French query and press Enter, the results show
the clips the API ranks first with their French captions and players whose audio the browser can decode;
then they pick a sound file and get the sound's neighbours, a text file gets an error on the page; the
page fits a phone's width. Skips (with the reason) where selenium, chromium or chromedriver is missing:
``scripts/setup-system.sh`` installs the Debian packages when run as root.
"""

import time
import urllib.parse

import pytest

pytest.importorskip("fastapi", reason="mlatr serve needs the serve extra: pip install 'mlatr[serve]'")
selenium = pytest.importorskip("selenium", reason="the browser test needs selenium (pip install 'mlatr[dev]')")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

from browsertools import CHROMEDRIVER, CHROMIUM, MISSING, start_chromium  # noqa: E402
from mlatr.data.manifest import Manifest  # noqa: E402
from mlatr.serve.app import create_app  # noqa: E402
from mlatr.serve.live_index import LiveIndex  # noqa: E402
from servetools import request, running_server, upload  # noqa: E402

pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason=MISSING)


@pytest.fixture
def browser(tmp_path):
    driver = start_chromium(tmp_path / "profile")
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


def _ready(driver, url):
    driver.get(url)
    wait(driver, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")


def _search(driver, text):
    box = driver.find_element(By.ID, "q")
    box.clear()
    box.send_keys(text, Keys.ENTER)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#results .result")
         and "result" in d.find_element(By.ID, "status").text)
    return driver.find_elements(By.CSS_SELECTOR, "#results .result")


@pytest.fixture
def toy_server(served_toy):
    live = LiveIndex(served_toy[2])
    live.reload()
    with running_server(create_app(live)) as base:
        yield base


def test_cards_evidence_waveform_score_download_and_more_like_this(browser, toy_server):
    base = toy_server
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",  # a 1000-px-tall viewport, exactly
                            {"width": 1100, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
    _ready(browser, base + "/?lang=fra")
    items = _search(browser, "un son aigu double")
    api = request(base + "/search?" + urllib.parse.urlencode({"q": "un son aigu double", "lang": "fra"})).json()
    assert [i.get_attribute("data-id") for i in items] == [r["id"] for r in api["results"]]
    # compact: at least 8 whole cards on a 1000-px-tall window
    inner = browser.execute_script("return window.innerHeight")
    assert inner == 1000
    bottoms = [i.rect["y"] + i.rect["height"] for i in items]
    assert sum(b <= inner for b in bottoms) >= 8
    # evidence: the API's, chip by chip (caption match with its caption and language, keywords, sound)
    for item, r in zip(items, api["results"], strict=True):
        chips = [c.text for c in item.find_elements(By.CSS_SELECTOR, ".evidence .chip")]
        assert len(chips) == len(r["evidence"])
        for chip, e in zip(chips, r["evidence"], strict=True):
            if e["source"] == "caption":
                assert chip == f"caption “{e['text']}” ({e['lang']})"
            elif e["source"] == "keyword":
                assert chip == "keywords: " + ", ".join(e["terms"])
            else:
                assert chip == f"sound #{e['rank']}"
    assert any(e["source"] == "keyword" for e in api["results"][0]["evidence"])
    # relevance bar and number: each result's calibrated relevance
    shares = [float(i.find_element(By.CSS_SELECTOR, ".score-bar").get_attribute("data-relevance")) for i in items]
    assert shares == pytest.approx([r["relevance"] for r in api["results"]], abs=1e-3)
    assert all(f"relevance {r['relevance']:.2f}" in i.text for r, i in zip(api["results"], items, strict=True))
    # "nothing relevant": the state above the closest results exactly when the API says so, with its threshold
    # (the toy's one-epoch model reaches no threshold: the state is shown; the same answer saying the
    # opposite, through the page's own renderer, shows the results alone)
    banner = browser.find_elements(By.ID, "nothing-relevant")
    assert (len(banner) == 1) == api["nothing_relevant"]
    if banner:
        assert f"(relevance {api['relevance']:.2f}, below {api['min_relevance']:.2f})" in banner[0].text
        assert banner[0].location["y"] < items[0].location["y"]
    browser.execute_script("show(Object.assign({}, arguments[0], {nothing_relevant: !arguments[0].nothing_relevant}),"
                           " 'a test');", api)
    assert (len(browser.find_elements(By.ID, "nothing-relevant")) == 1) != api["nothing_relevant"]
    # ranked by captions: the caption that ranked each hit is its evidence (text and language), as in the API
    Select(browser.find_element(By.ID, "rank")).select_by_value("captions")
    items = _search(browser, "un son aigu double")
    by_caption = request(base + "/search?" + urllib.parse.urlencode(
        {"q": "un son aigu double", "lang": "fra", "rank": "captions"})).json()
    assert [i.get_attribute("data-id") for i in items] == [r["id"] for r in by_caption["results"]]
    e = next(e for e in by_caption["results"][0]["evidence"] if e["source"] == "caption")
    assert e["text"] == "un son aigu double" and e["lang"] == "fra"
    assert f"caption “{e['text']}” ({e['lang']})" in [
        c.text for c in items[0].find_elements(By.CSS_SELECTOR, ".evidence .chip")]
    Select(browser.find_element(By.ID, "rank")).select_by_value("hybrid")
    items = _search(browser, "un son aigu double")
    # waveform thumbnail: one bar per peak the server computed
    first = api["results"][0]
    peaks = request(base + "/clips/waveform/" + urllib.parse.quote(first["id"], safe="") + "?bins=60").json()["peaks"]
    svg = items[0].find_element(By.CSS_SELECTOR, "svg.wave")
    wait(browser, lambda d: svg.get_attribute("data-bins") == "60")
    heights = [float(r.get_attribute("height")) for r in svg.find_elements(By.TAG_NAME, "rect")]
    assert heights == pytest.approx([max(0.5, p * 20) for p in peaks], abs=1e-6)
    # download link: the clip's bytes, with a file name
    link = items[0].find_element(By.CSS_SELECTOR, "a.download")
    assert link.get_attribute("href") == base + first["audio_url"] and link.get_attribute("download")
    assert request(link.get_attribute("href")).status == 200
    # more like this on the second result: sound-to-sound from that clip, itself left out
    second = api["results"][1]["id"]
    items[1].find_element(By.CSS_SELECTOR, "button.more").click()
    wait(browser, lambda d: "results for sounds like" in d.find_element(By.ID, "status").text)
    similar = request(base + "/clips/similar/" + urllib.parse.quote(second, safe="") + "?k=10").json()
    shown = [i.get_attribute("data-id") for i in browser.find_elements(By.CSS_SELECTOR, "#results .result")]
    assert shown == [r["id"] for r in similar["results"]] and second not in shown and len(shown) == 10


def test_cut_off_after_the_last_caption_or_keyword_match(browser, toy_server):
    base = toy_server
    _ready(browser, base + "/")
    data = request(base + "/search?" + urllib.parse.urlencode({"q": "un son aigu double", "k": 10})).json()
    data["nothing_relevant"] = False  # the cut-off alone (the state above the results is checked elsewhere)
    # the page's own renderer over the API's answer, with text evidence kept on results 1, 3, 4 only
    for i, r in enumerate(data["results"]):
        if i not in (0, 2, 3):
            r["evidence"] = [e for e in r["evidence"] if e["source"] == "sound"]
    assert all(any(e["source"] != "sound" for e in data["results"][i]["evidence"]) for i in (0, 2, 3))
    browser.execute_script("show(arguments[0], 'a test');", data)
    rows = browser.find_elements(By.CSS_SELECTOR, "#results > li")
    kinds = ["cut" if "cutoff" in li.get_attribute("class") else "r" for li in rows]
    assert kinds == ["r"] * 4 + ["cut"] + ["r"] * 6 and "sound only" in rows[4].text
    # a ranking other than hybrid: no line
    browser.execute_script("show(Object.assign({}, arguments[0], {rank: 'audio'}), 'a test');", data)
    assert not browser.find_elements(By.CSS_SELECTOR, "#results > li.cutoff")


def test_sound_search_plays_the_query_clears_the_box_and_shows_captions_first(browser, toy_server, served_toy):
    base = toy_server
    manifest_path = served_toy[0]
    _ready(browser, base + "/")
    _search(browser, "un son grave")
    wav = manifest_path.parent / "audio" / "clip004.wav"
    browser.find_element(By.ID, "file").send_keys(str(wav))
    wait(browser, lambda d: "clip004.wav" in d.find_element(By.ID, "status").text
         and "result" in d.find_element(By.ID, "status").text)
    assert browser.find_element(By.ID, "q").get_attribute("value") == ""
    assert "q=" not in browser.current_url
    player = browser.find_element(By.ID, "query-audio")
    assert player.is_displayed() and player.get_attribute("src").startswith("blob:")
    duration = browser.execute_async_script(
        "const done = arguments[arguments.length - 1]; const a = document.getElementById('query-audio');"
        "if (a.readyState >= 1) { done(a.duration); return; }"
        "a.addEventListener('loadedmetadata', () => done(a.duration)); a.addEventListener('error', () => done(-1));")
    import soundfile as sf
    assert duration == pytest.approx(sf.info(wav).duration, abs=0.05)
    near = browser.find_element(By.ID, "nearest-captions")
    results = browser.find_element(By.ID, "results")
    assert near.is_displayed() and near.rect["y"] < results.rect["y"]  # the nearest captions come first
    api = upload(base + "/search/audio?k=10", "clip004.wav", wav.read_bytes()).json()
    assert f"“{api['captions'][0]['text']}”" in near.text
    # a text search afterwards hides the sound's player again
    _search(browser, "un son aigu")
    assert not browser.find_element(By.ID, "query-sound").is_displayed()


def test_language_picker_says_when_the_language_does_not_matter(browser, toy_server):
    base = toy_server
    health = request(base + "/health").json()
    assert health["language_required"] is False  # the toy model's text encoder has no language embedding
    _ready(browser, base + "/")  # the browser says en-US: nothing may be preselected for it
    assert Select(browser.find_element(By.ID, "lang")).first_selected_option.get_attribute("value") == ""
    note = browser.find_element(By.ID, "lang-note")
    assert note.is_displayed() and "does not change the results" in note.text


def test_language_picker_preselects_for_an_encoder_that_reads_it(browser, served_toy, tmp_path):
    from mlatr.models.registry import build_text_encoder
    from servetools import build_toy_index, untrained_checkpoint

    manifest = Manifest.load(served_toy[0])
    corpus = [t for c in manifest.clips for texts in c.captions.values() for t in texts]
    text = build_text_encoder("small-transformer", corpus=corpus, vocab_size=300, dim=32, num_layers=1,
                              num_heads=2, ff_dim=64, languages=["eng", "fra"])
    path = build_toy_index(served_toy[0], untrained_checkpoint(tmp_path / "lang.pt", text), tmp_path / "l.idx.npz")
    live = LiveIndex(path)
    live.reload()
    with running_server(create_app(live)) as base:
        _ready(browser, base + "/")
        options = [o.get_attribute("value") for o in browser.find_elements(By.CSS_SELECTOR, "#lang option")]
        assert options == ["eng", "fra"]  # no "any language" for an encoder that needs it
        assert Select(browser.find_element(By.ID, "lang")).first_selected_option.get_attribute("value") == "eng"
        assert not browser.find_element(By.ID, "lang-note").is_displayed()


def test_a_network_failure_reads_as_a_human_message(browser, served_toy):
    live = LiveIndex(served_toy[2])
    live.reload()
    with running_server(create_app(live)) as base:
        _ready(browser, base + "/")
    # the server is gone; the page is still open
    browser.find_element(By.ID, "q").send_keys("un son aigu", Keys.ENTER)
    wait(browser, lambda d: "error" in d.find_element(By.ID, "status").get_attribute("class"))
    message = browser.find_element(By.ID, "status").text
    assert "Cannot reach the search server" in message and "Failed to fetch" not in message


def test_api_docs_page_works_offline(browser, toy_server):
    browser.get(toy_server + "/docs")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".swagger-ui .info .title"))
    assert "mlatr sound search" in browser.find_element(By.CSS_SELECTOR, ".swagger-ui .info .title").text
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock-summary-path"))
    paths = {e.get_attribute("data-path") or e.text for e in browser.find_elements(By.CSS_SELECTOR,
                                                                                     ".opblock-summary-path")}
    assert {"/search", "/search/audio", "/clips/similar/{clip_id}"} <= {p.replace("\u200b", "") for p in paths}


def _ids(driver):
    """The shown results' ids, read at once (the list may be replaced between two reads of its items)."""
    return driver.execute_script("return [...document.querySelectorAll('#results .result')].map(li => li.dataset.id)")


def test_more_like_this_is_a_link_that_reloads_and_the_box_says_it(browser, toy_server):
    base = toy_server
    _ready(browser, base + "/?lang=fra")
    items = _search(browser, "un son aigu double")
    second = items[1].get_attribute("data-id")
    items[1].find_element(By.CSS_SELECTOR, "button.more").click()
    wait(browser, lambda d: "results for sounds like" in d.find_element(By.ID, "status").text)
    similar = request(base + "/clips/similar/" + urllib.parse.quote(second, safe="") + "?k=10").json()
    expected = [r["id"] for r in similar["results"]]
    assert _ids(browser) == expected
    assert browser.find_element(By.ID, "q").get_attribute("value") == "like:" + second
    url = browser.current_url
    assert urllib.parse.parse_qs(urllib.parse.urlparse(url).query) == {"like": [second], "k": ["10"]}
    # the link, opened again (shared or reloaded), gives the same results and the same box
    _ready(browser, url)
    wait(browser, lambda d: "results for sounds like" in d.find_element(By.ID, "status").text and _ids(d) == expected)
    assert browser.find_element(By.ID, "q").get_attribute("value") == "like:" + second
    # the box's like:ID, searched again with another k, is the same query
    Select(browser.find_element(By.ID, "k")).select_by_visible_text("5")
    browser.find_element(By.ID, "q").send_keys(Keys.ENTER)
    wait(browser, lambda d: len(_ids(d)) == 5)
    assert _ids(browser) == expected[:5] and "k=5" in browser.current_url


def test_phone_width_shows_whole_meta_lines_and_more_than_two_results(browser, toy_server):
    base = toy_server
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",  # a phone: 390 x 844 CSS pixels
                            {"width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": True})
    _ready(browser, base + "/")
    items = _search(browser, "un son aigu double")
    assert browser.execute_script("return [window.innerWidth, window.innerHeight]") == [390, 844]
    assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    bottoms = [i.rect["y"] + i.rect["height"] for i in items]
    assert sum(b <= 844 for b in bottoms) >= 3, bottoms
    for item in items:
        meta = item.find_element(By.CSS_SELECTOR, ".meta")
        clipped = browser.execute_script(
            "const m = arguments[0], box = m.parentElement.getBoundingClientRect(), r = m.getBoundingClientRect();"
            "return m.scrollWidth > m.clientWidth + 1 || r.right > box.right + 1 || r.bottom > box.bottom + 1;", meta)
        assert not clipped and item.get_attribute("data-id") in meta.text and "relevance" in meta.text


def test_docs_link_stale_upload_error_and_the_query_sound_found_in_the_library(browser, toy_server, served_toy,
                                                                               tmp_path):
    base = toy_server
    _ready(browser, base + "/")
    link = browser.find_element(By.ID, "docs-link")
    assert link.is_displayed() and link.get_attribute("href") == base + "/docs"
    assert request(link.get_attribute("href")).status == 200
    # a refused upload: its error, then gone as soon as the person types; no player of it left; the picker empty
    note = tmp_path / "notes.txt"
    note.write_text("not a sound\n" * 20)
    browser.find_element(By.ID, "file").send_keys(str(note))
    wait(browser, lambda d: "error" in d.find_element(By.ID, "status").get_attribute("class"))
    assert "not a sound file" in browser.find_element(By.ID, "status").text
    assert not browser.find_element(By.ID, "query-sound").is_displayed()
    assert browser.find_element(By.ID, "file").get_attribute("value") == ""
    browser.find_element(By.ID, "q").send_keys("un")
    status = browser.find_element(By.ID, "status")
    assert status.text == "" and "error" not in status.get_attribute("class")
    # a sound that is itself in the library: its card says so, not only its 1.000
    wav = served_toy[0].parent / "audio" / "clip007.wav"
    browser.find_element(By.ID, "file").send_keys(str(wav))
    wait(browser, lambda d: "clip007.wav" in d.find_element(By.ID, "status").text
         and "result" in d.find_element(By.ID, "status").text)
    api = upload(base + "/search/audio?k=10", "clip007.wav", wav.read_bytes()).json()
    same = [r["id"] for r in api["results"] if r["same_audio"]]
    assert api["results"][0]["id"] == "clip007" and same == ["clip007"]
    items = browser.find_elements(By.CSS_SELECTOR, "#results .result")
    marked = [i.get_attribute("data-id") for i in items if i.find_elements(By.CSS_SELECTOR, ".chip.same")]
    assert marked == same and "your sound" in items[0].find_element(By.CSS_SELECTOR, ".chip.same").text


def test_evidence_chips_are_read_whole_at_desktop_width(browser, toy_server):
    """Issue 46: evidence chips readable, not cut to a few letters. At 1100 px every chip shows its whole text
    (they wrap onto another line rather than shrink), in the chips' own small type, inside the card."""
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": 1100, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
    _ready(browser, toy_server + "/?lang=fra")
    items = _search(browser, "un son aigu double")
    chips = [c for i in items for c in i.find_elements(By.CSS_SELECTOR, ".evidence .chip")]
    assert any("caption" in c.get_attribute("class") for c in chips)
    for chip in chips:
        cut, size, outside = browser.execute_script(
            "const c = arguments[0], card = c.closest('.result').getBoundingClientRect();"
            "const r = c.getBoundingClientRect();"
            "return [c.scrollWidth > c.clientWidth + 1, parseFloat(getComputedStyle(c).fontSize),"
            " r.right > card.right + 1];", chip)
        assert not cut and not outside, chip.text
        assert size < 13, (chip.text, size)  # the chips' 0.72rem, not a caption line's 1rem
