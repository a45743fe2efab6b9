"""Hash splits of a manifest (mlatr.data.splits) and the `mlatr data split` command."""

import hashlib

from mlatr.cli import main
from mlatr.data.manifest import Clip, Manifest
from mlatr.data.splits import assign_hash_splits, split_of


def test_hash_splits_are_stable_and_follow_the_fractions():
    ids = [f"lib/sound-{i}" for i in range(2000)]
    u = int.from_bytes(hashlib.sha256(b"lib/sound-7").digest()[:8], "big") / 2**64
    assert split_of("lib/sound-7") == ("test" if u < 0.25 else "val" if u < 0.35 else "train")
    m = Manifest(clips=[Clip(id=i, audio=f"{i}.wav", captions={"eng": ["x"]}) for i in ids])
    counts = assign_hash_splits(m)
    assert counts["test"] + counts["val"] + counts["train"] == 2000
    assert abs(counts["test"] / 2000 - 0.25) < 0.03 and abs(counts["val"] / 2000 - 0.10) < 0.03
    # a clip's split does not depend on the others
    small = Manifest(clips=[Clip(id=i, audio="a.wav", captions={"eng": ["x"]}) for i in ids[::7]])
    assign_hash_splits(small)
    assert [c.split for c in small.clips] == [c.split for c in m.clips[::7]]




def test_data_split_command_rewrites_the_manifest(tmp_path, capsys):
    path = tmp_path / "m.jsonl"
    Manifest(clips=[Clip(id=f"lib/s{i}", audio=f"s{i}.wav", captions={"eng": ["x"]}) for i in range(40)]).save(path)
    assert main(["data", "split", str(path)]) == 0
    m = Manifest.load(path)
    assert [c.split for c in m.clips] == [split_of(f"lib/s{i}") for i in range(40)]
    assert "40 clips" in capsys.readouterr().out
    assert main(["data", "split", str(path), "--val", "0.7", "--test", "0.5"]) == 2
