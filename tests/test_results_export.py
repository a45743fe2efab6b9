"""Results out to a sound designer's tools (mlatr.search.export, the page's results): ``mlatr search --csv``
holds what the JSON results hold; the page (Debian's chromium, headless) copies a result's path, drags a result
out as its file (Chrome's DownloadURL), scrubs and loops the player, and exports the picks as the same CSV.

The library is test_moments' band library: the toy tones and a 30 s recording with a high tone at 13 s, indexed
as segments, so one hit says where it matched.
"""

from __future__ import annotations

import csv
import io
import json
import time

import pytest
import soundfile as sf

from browsertools import start_chromium
from clitools import assert_user_error, run_cli
from mlatr.data.manifest import Manifest
from mlatr.inference.checkpoint import load_model
from mlatr.search import build_index
from mlatr.search.export import CSV_FIELDS, safe_cell
from test_filtered_entries import library_with_model  # noqa: F401 (a fixture)
from test_moments import EVENT, band_library  # noqa: F401 (a fixture)


def _rows(text: str) -> list[dict[str, str]]:
    reader = csv.DictReader(io.StringIO(text))
    assert tuple(reader.fieldnames) == CSV_FIELDS
    return list(reader)


def _number(cell: str) -> float | None:
    return None if cell == "" else float(cell)


def _same_as_json(rows: list[dict[str, str]], results: list[dict], query: str) -> None:
    """Each CSV row says what its JSON result says (and the file's duration, read here from its header)."""
    assert [r["id"] for r in rows] == [h["id"] for h in results]
    for row, hit in zip(rows, results, strict=True):
        assert row["query"] == query and int(row["rank"]) == hit["rank"] and row["path"] == hit["path"]
        assert _number(row["score"]) == hit["score"] and _number(row["relevance"]) == hit["relevance"]
        assert _number(row["start"]) == hit["start"] and _number(row["end"]) == hit["end"]
        assert row["caption"] == (hit["captions"][0] if hit["captions"] else "")
        assert _number(row["duration"]) == pytest.approx(sf.info(hit["path"]).duration, abs=1e-9)


def test_a_text_cell_a_spreadsheet_would_run_gets_an_apostrophe():
    assert safe_cell("=HYPERLINK(\"x\")") == "'=HYPERLINK(\"x\")" and safe_cell("-6 dB door") == "'-6 dB door"
    assert safe_cell("@x") == "'@x" and safe_cell("+1") == "'+1" and safe_cell("\tx") == "'\tx"
    assert safe_cell("door slam") == "door slam" and safe_cell("") == ""


def test_search_csv_holds_what_the_json_results_hold(band_library, tmp_path, capsys):  # noqa: F811
    manifest, ckpt, long, query = band_library
    idx = tmp_path / "cli.idx"
    assert run_cli(capsys, "index", "build", manifest, "--model", ckpt, "-o", idx, "--no-progress").code == 0
    # a sound query: the long recording's row says where it matched
    r = run_cli(capsys, "search", idx, "--audio", query, "-k", "30", "--json", "--csv", tmp_path / "sound.csv")
    assert r.code == 0
    results = json.loads(r.out)["results"]
    rows = _rows((tmp_path / "sound.csv").read_text(encoding="utf-8"))
    _same_as_json(rows, results, str(query))
    long_row = next(row for row in rows if row["id"] == "REC_0042")
    assert float(long_row["start"]) <= EVENT[0] and EVENT[1] <= float(long_row["end"])
    assert float(long_row["duration"]) == pytest.approx(30.0) and long_row["path"] == str(long.resolve())
    assert all(row["start"] == row["end"] == "" for row in rows if row["id"] != "REC_0042")
    # a text query, the CSV to stdout (instead of the table)
    r = run_cli(capsys, "search", idx, "a high tone", "-k", "5", "--csv", "-")
    assert r.code == 0 and "rank  relev." not in r.out
    text = run_cli(capsys, "search", idx, "a high tone", "-k", "5", "--json")
    _same_as_json(_rows(r.out), json.loads(text.out)["results"], "a high tone")


def test_search_csv_refuses_what_it_cannot_write(band_library, tmp_path, capsys):  # noqa: F811
    manifest, ckpt, _, query = band_library
    idx = tmp_path / "cli.idx.npz"
    assert run_cli(capsys, "index", "build", manifest, "--model", ckpt, "-o", idx, "--no-progress").code == 0
    assert_user_error(run_cli(capsys, "search", idx, "a tone", "--csv", idx), "--csv", "index")
    assert_user_error(run_cli(capsys, "search", idx, "a tone", "--json", "--csv", "-"), "--csv -", "--json")
    before = query.read_bytes()
    assert_user_error(run_cli(capsys, "search", idx, "--audio", query, "--csv", query), "--csv", "query sound")
    assert query.read_bytes() == before
    (tmp_path / "folder.csv").mkdir()
    assert_user_error(run_cli(capsys, "search", idx, "a tone", "--csv", tmp_path / "folder.csv"), "--csv",
                      "folder.csv")


def test_the_page_copies_drags_scrubs_loops_and_exports_picks(band_library, tmp_path, capsys):  # noqa: F811
    pytest.importorskip("fastapi")
    pytest.importorskip("selenium")
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from mlatr.serve.app import create_app
    from mlatr.serve.live_index import LiveIndex
    from servetools import request, running_server, upload

    manifest, ckpt, long, query = band_library
    build_index(load_model(ckpt), Manifest.load(manifest), tmp_path / "page.idx", batch_size=8)
    live = LiveIndex(tmp_path / "page.idx")
    live.reload()
    browser = start_chromium(tmp_path / "profile", "--autoplay-policy=no-user-gesture-required")
    wait = lambda condition, timeout=30: WebDriverWait(browser, timeout).until(condition)  # noqa: E731
    try:
        with running_server(create_app(live)) as base:
            browser.execute_cdp_cmd("Browser.grantPermissions", {
                "origin": base, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
            browser.get(base + "/")
            wait(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
            assert not browser.find_element(By.ID, "picks").is_displayed()
            browser.find_element(By.ID, "file").send_keys(str(query))  # search by the sound, as a person does
            wait(lambda d: "query.wav" in d.find_element(By.ID, "status").text
                 and "result" in d.find_element(By.ID, "status").text)
            api = upload(base + "/search/audio?k=10", "query.wav", query.read_bytes()).json()["results"]
            found = next(r for r in api if r["id"] == "REC_0042")
            assert found["path"] == str(long.resolve())
            card = browser.find_element(By.CSS_SELECTOR, '#results .result[data-id="REC_0042"]')
            # copy path: the file's path in the clipboard, and the page says so
            card.find_element(By.CSS_SELECTOR, "button.copy").click()
            wait(lambda d: d.find_element(By.ID, "status").text == f"Copied {found['path']}")
            copied = browser.execute_async_script(
                "const done = arguments[arguments.length - 1];"
                "navigator.clipboard.readText().then(done, (e) => done('failed: ' + e));")
            assert copied == found["path"]
            # dragged out: the file as Chrome's DownloadURL (type:name:url), its URL serving the file's bytes
            dragged = browser.execute_script(
                "const dt = new DataTransfer();"
                "arguments[0].dispatchEvent(new DragEvent('dragstart', {dataTransfer: dt, bubbles: true}));"
                "return [dt.getData('DownloadURL'), dt.getData('text/uri-list'), dt.getData('text/plain')];", card)
            url = base + found["audio_url"]
            assert dragged == [f"audio/wav:REC_0042.wav:{url}", url, found["path"]]
            assert request(url).body == long.read_bytes()
            # scrub: pressing a quarter of the way along the waveform plays from a quarter of the file
            svg = card.find_element(By.CSS_SELECTOR, "svg.wave")
            audio = card.find_element(By.TAG_NAME, "audio")
            width = svg.rect["width"]
            ActionChains(browser).move_to_element_with_offset(svg, round(-width / 4), 0).click().perform()
            wait(lambda d: d.execute_script("return arguments[0].readyState", audio) >= 1)
            t = browser.execute_script("return arguments[0].currentTime", audio)
            assert 0.25 * 30 - 30 / width - 0.5 <= t <= 0.25 * 30 + 2.0, t  # a pixel's worth, and what played since
            head = float(svg.find_element(By.CSS_SELECTOR, "line.playhead").get_attribute("x1"))
            assert head == pytest.approx(60 * browser.execute_script("return arguments[0].currentTime", audio) / 30,
                                         abs=60 * 1.0 / 30)
            # loop: the matched moment plays again from its start after its end
            loop = card.find_element(By.CSS_SELECTOR, "button.loop")
            loop.click()
            assert loop.get_attribute("aria-pressed") == "true" and audio.get_property("loop") is False
            browser.execute_script("arguments[0].currentTime = arguments[1] - 0.3; arguments[0].play();", audio,
                                   found["end"])
            wait(lambda d: d.execute_script(
                "const a = arguments[0]; return !a.paused && a.currentTime < arguments[1] - 1 "
                "&& a.currentTime >= arguments[2] - 0.01;", audio, found["end"], found["start"]), timeout=15)
            other = browser.find_element(By.CSS_SELECTOR, '#results .result:not([data-id="REC_0042"])')
            other.find_element(By.CSS_SELECTOR, "button.loop").click()  # a clip without a moment: loops whole
            assert other.find_element(By.TAG_NAME, "audio").get_property("loop") is True
            browser.execute_script("document.querySelectorAll('audio').forEach((a) => a.pause());")
            # picks: two results, exported as the CSV mlatr search --csv writes (the page's caption: the query's)
            card.find_element(By.CSS_SELECTOR, "button.pick").click()
            other.find_element(By.CSS_SELECTOR, "button.pick").click()
            assert browser.find_element(By.ID, "picks-count").text == "2 picks"
            browser.execute_cdp_cmd("Browser.setDownloadBehavior",  # the export link, clicked: a file downloaded
                                    {"behavior": "allow", "downloadPath": str(tmp_path / "downloads")})
            browser.find_element(By.ID, "export-picks").click()
            saved = tmp_path / "downloads" / "mlatr-picks.csv"
            wait(lambda d: saved.is_file() and saved.stat().st_size > 0)
            exported = saved.read_text(encoding="utf-8")
            assert exported == browser.execute_script("return picksCSV()")
            rows = _rows(exported)
            by_id = {r["id"]: r for r in api}
            picked = [by_id["REC_0042"], by_id[other.get_attribute("data-id")]]
            assert [r["id"] for r in rows] == [p["id"] for p in picked]
            for row, hit in zip(rows, picked, strict=True):
                assert row["query"] == "query.wav" and int(row["rank"]) == hit["rank"] and row["path"] == hit["path"]
                assert [_number(row[f]) for f in ("score", "relevance", "duration", "start", "end")] == pytest.approx(
                    [hit[f] for f in ("score", "relevance", "duration", "start", "end")], abs=1e-12)
                assert row["caption"] == (hit["caption"] or "")
            # the same rows as the CLI's CSV of the same search
            idx = tmp_path / "page.idx"
            assert run_cli(capsys, "search", idx, "--audio", query, "-k", "10", "--csv", tmp_path / "cli.csv").code == 0
            cli = {r["id"]: r for r in _rows((tmp_path / "cli.csv").read_text(encoding="utf-8"))}
            for row in rows:
                assert row["rank"] == cli[row["id"]]["rank"] and row["path"] == cli[row["id"]]["path"]
                for f in ("start", "end", "duration"):  # JS writes 12 where Python writes 12.0
                    assert _number(row[f]) == pytest.approx(_number(cli[row["id"]][f]), abs=1e-9), f
                assert float(row["score"]) == pytest.approx(float(cli[row["id"]]["score"]), abs=1e-6)
            # kept across a reload; cleared on request
            browser.refresh()
            wait(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
            assert browser.find_element(By.ID, "picks-count").text == "2 picks"
            browser.find_element(By.ID, "clear-picks").click()
            assert not browser.find_element(By.ID, "picks").is_displayed()
            time.sleep(0.1)
    finally:
        browser.quit()


def test_each_card_says_the_files_format_rate_and_channels(library_with_model, tmp_path):  # noqa: F811
    """The API's results carry the file's format, sample rate and channels from the index's facets (None where it
    has none, or a value of another type), and the page's card shows them."""
    pytest.importorskip("fastapi")
    pytest.importorskip("selenium")
    from selenium.webdriver.common.by import By

    from mlatr.search import Index
    from mlatr.serve.app import create_app
    from mlatr.serve.live_index import LiveIndex
    from mlatr.serve.results import card_facet
    from servetools import request, running_server
    from test_serve_browser import wait

    assert card_facet({"format": "wav", "channels": True, "sample_rate": "48000"}, "format") == "wav"
    assert card_facet({"channels": True}, "channels") is None and card_facet({"sample_rate": "48000"},
                                                                              "sample_rate") is None
    path, _, _ = library_with_model
    index = Index.load(path)
    facets = {cid: index.clip_columns["facets"][r] or {} for cid, r in index.tables.live_rows().items()}
    live = LiveIndex(path)
    live.reload()
    browser = start_chromium(tmp_path / "profile")
    try:
        with running_server(create_app(live)) as base:
            api = request(base + "/search?q=rain&k=20").json()["results"]
            for r in api:
                f = facets[r["id"]]
                assert (r["format"], r["sample_rate"], r["channels"]) == (f.get("format"), f.get("sample_rate"),
                                                                          f.get("channels"))
            shown = [r for r in api if r["format"] and r["channels"] in (1, 2)]
            assert shown and any(r["format"] is None for r in api)  # a clip without facets: nothing said
            browser.get(base + "/?q=rain&k=20")
            wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#results .result")) == len(api))
            for r in shown:
                meta = browser.find_element(By.CSS_SELECTOR, f'#results .result[data-id="{r["id"]}"] .meta').text
                assert f"{r['format'].upper()} {'mono' if r['channels'] == 1 else 'stereo'}" in meta
    finally:
        browser.quit()
