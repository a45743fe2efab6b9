"""The apertium backend on real captions (Debian's apertium-eng-spa / apertium-eng-cat; installed by
scripts/setup-system.sh where it can, skipped with the reason otherwise)."""

import shutil
import subprocess

import pytest

from mlatr.data.manifest import Clip, Manifest
from mlatr.errors import MlatrError
from mlatr.translation import ApertiumBackend, Translator, translate_manifest
from mlatr.translation.apertium_backend import installed_modes

#: AudioCaps-like (no final stop) and Clotho-like (final stop) captions: in a batch, a line break alone
#: would make Apertium read the next caption as the same sentence.
CAPTIONS = ["A dog barks while a car passes by", "Rain falls on a metal roof",
            "A man speaks and birds sing in the background.", "water is running from a tap"]


def _need(*modes):
    if shutil.which("apertium") is None:
        pytest.skip("apertium is not installed (apt-get install apertium-eng-spa apertium-eng-cat; "
                    "scripts/setup-system.sh does it as root)")
    missing = [m for m in modes if m not in installed_modes()]
    if missing:
        pytest.skip(f"apertium modes {', '.join(missing)} are not installed (apertium-eng-spa / apertium-eng-cat)")


def _alone(mode: str, text: str) -> str:
    """What `apertium -u MODE` gives for this caption on its own (one process per caption), spaces collapsed."""
    return " ".join(subprocess.run(["apertium", "-u", mode], input=text + "\n", capture_output=True, text=True,
                                   check=True).stdout.split())


def test_real_captions_to_spanish_and_catalan():
    _need("eng-spa", "eng-cat")
    clips = [Clip(id=f"c{i}", audio=f"a{i}.wav", captions={"eng": [c]}) for i, c in enumerate(CAPTIONS)]
    backend = ApertiumBackend(batch_size=4)
    out, summary = translate_manifest(Manifest(clips=clips), ["spa", "cat"], Translator(backend), progress=False)
    assert (summary.translated, summary.failed) == (8, 0)
    for clip, source in zip(out.clips, CAPTIONS, strict=True):
        for lang, mode in (("spa", "eng-spa"), ("cat", "eng-cat")):
            # a batch (one process, one caption per line) gives what each caption gives alone
            assert clip.captions[lang] == [_alone(mode, source)] and clip.captions[lang][0] != source
    assert "perro" in out[0].captions["spa"][0] and "gos" in out[0].captions["cat"][0]
    assert "lluvia" in out[1].captions["spa"][0].lower() and "pluja" in out[1].captions["cat"][0].lower()
    assert backend.model_for("eng", "cat") == "eng-cat"


def test_back_translation_pairs():
    _need("spa-eng", "cat-eng")
    got = Translator(ApertiumBackend()).translate(["Un perro ladra"], "spa", "eng")
    assert "dog" in got["Un perro ladra"].translation.lower()


def test_missing_pair_is_named():
    _need("eng-spa")
    with pytest.raises(MlatrError, match=r"no eng -> jpn translator.*installed: .*eng-spa"):
        ApertiumBackend().check_pair("eng", "jpn")


def test_missing_binary_is_explained():
    with pytest.raises(MlatrError, match="apt-get install apertium-eng-spa"):
        ApertiumBackend(binary="apertium-not-here")
