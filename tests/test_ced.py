"""CED: checkpoint layouts load with a report, positional embeddings resize, padding and chunking,
freezing, gradient checkpointing and the published parameter counts."""

import pytest
import torch

from mlatr.errors import MlatrError
from mlatr.models.ced import (
    CED_SIZES,
    CEDAudioEncoder,
    ced_parameter_count,
    read_ced_checkpoint,
    to_original_ced_keys,
)
from mlatr.models.registry import build_audio_encoder


def tiny(**kw) -> CEDAudioEncoder:
    torch.manual_seed(kw.pop("seed", 0))
    opts = {"dim": 32, "depth": 2, "num_heads": 2, "target_length": 64, **kw}
    return build_audio_encoder("ced", **opts)


def original_checkpoint(model: CEDAudioEncoder) -> dict[str, torch.Tensor]:
    """The model's weights as the original repository stores them, with its extra buffers and head."""
    state = to_original_ced_keys(model.state_dict())
    state["front_end.0.spectrogram.window"] = torch.hann_window(512)
    state["front_end.0.mel_scale.fb"] = torch.zeros(257, 64)
    state["outputlayer.0.weight"] = torch.ones(model.dim)
    state["outputlayer.1.weight"] = torch.zeros(527, model.dim)
    return state


@pytest.mark.parametrize("size,published_m", [("tiny", 5.5), ("mini", 9.6), ("small", 22.0), ("base", 86.0)])
def test_parameter_counts_of_the_real_sizes(size, published_m):
    # published sizes: CED paper (arXiv 2308.11957) Table 1 / the mispeech/ced-* model cards
    with torch.device("meta"):
        model = CEDAudioEncoder(size=size)
    counted = sum(p.numel() for p in model.parameters())
    assert counted == ced_parameter_count(size)
    assert (model.dim, model.depth, model.num_heads) == CED_SIZES[size]
    with_head = ced_parameter_count(size, include_classifier=True)
    assert abs(with_head / 1e6 - published_m) / published_m < 0.025, with_head
    d = CED_SIZES[size][0]
    assert model.time_pos_embed.shape == (1, d, 1, 63) and model.freq_pos_embed.shape == (1, d, 4, 1)


def test_ten_seconds_make_248_patches():
    model = tiny(target_length=1012).eval()
    out = model(torch.zeros(1, 160_000))
    # 1001 frames -> 62 time patches x 4 frequency patches = 248; frames are per time patch
    assert out.frames.shape == (1, 62, 32) and out.mask.all()


def test_original_layout_loads_with_no_missing_or_unexpected_keys(tmp_path):
    src = tiny(seed=1).eval()
    path = tmp_path / "audiotransformer_tiny.pt"
    torch.save(original_checkpoint(src), path)
    dst = tiny(seed=2, checkpoint=str(path), strict=True).eval()
    report = dst.load_report
    assert report.ok and not report.resized
    assert sorted(report.ignored) == ["front_end.0.mel_scale.fb", "front_end.0.spectrogram.window",
                                      "outputlayer.0.weight", "outputlayer.1.weight"]
    wave = torch.randn(2, 12_000)
    assert torch.allclose(src(wave).pooled, dst(wave).pooled, atol=1e-6)
    assert torch.equal(dst.init_bn.running_mean, src.init_bn.running_mean)


def test_hugging_face_layout_loads(tmp_path):
    src = tiny(seed=3)
    hf = {f"encoder.{k}": v for k, v in src.state_dict().items()}  # mispeech/ced-*: encoder. + init_bn.*
    hf["outputlayer.1.bias"] = torch.zeros(527)
    from safetensors.torch import save_file

    (tmp_path / "hf").mkdir()
    save_file({k: v.contiguous() for k, v in hf.items()}, str(tmp_path / "hf" / "model.safetensors"))
    dst = tiny(seed=4, checkpoint=str(tmp_path / "hf"), strict=True)
    assert dst.load_report.ok and dst.load_report.ignored == ["outputlayer.1.bias"]
    for k, v in src.state_dict().items():
        assert torch.equal(v, dst.state_dict()[k]), k


def test_time_positions_are_resized_on_load():
    src = tiny(seed=5, target_length=32)  # 2 time positions
    dst = tiny(seed=6, target_length=64)  # 4 time positions
    report = dst.load_ced_state_dict(src.state_dict(), strict=True)
    assert report.resized == {"time_pos_embed": ((1, 32, 1, 2), (1, 32, 1, 4))}
    # linear interpolation 2 -> 4 (half-pixel centres): positions at source coordinates -0.25, 0.25,
    # 0.75, 1.25, clamped to [0, 1]: weights (1, 0), (0.75, 0.25), (0.25, 0.75), (0, 1)
    a, b = src.time_pos_embed[..., 0], src.time_pos_embed[..., 1]
    expected = torch.stack([a, 0.75 * a + 0.25 * b, 0.25 * a + 0.75 * b, b], dim=-1)
    assert torch.allclose(dst.time_pos_embed, expected, atol=1e-6)
    back = tiny(seed=7, target_length=32)
    back.load_ced_state_dict(dst.state_dict(), strict=True)  # longer -> shorter: truncated
    assert torch.equal(back.time_pos_embed, dst.time_pos_embed[..., :2])


def test_wrong_keys_are_reported_and_strict_refuses(tmp_path):
    state = tiny(seed=8).state_dict()
    state["blocks.0.attn.qkvv.weight"] = state.pop("blocks.0.attn.qkv.weight")
    model = tiny(seed=9)
    before = model.blocks[0].attn.qkv.weight.detach().clone()
    report = model.load_ced_state_dict(state)
    assert report.missing == ["blocks.0.attn.qkv.weight"]
    assert report.unexpected == ["blocks.0.attn.qkvv.weight"]
    assert "missing 1 key(s): blocks.0.attn.qkv.weight" in report.describe()
    assert torch.equal(model.blocks[0].attn.qkv.weight, before)  # missing keys keep their values
    with pytest.raises(MlatrError, match="unexpected 1 key"):
        tiny(seed=9).load_ced_state_dict(state, strict=True)
    path = tmp_path / "bad.pt"
    torch.save(state, path)
    with pytest.warns(UserWarning, match="qkvv"):
        tiny(seed=9, checkpoint=str(path))
    with pytest.raises(MlatrError, match="shape mismatch"):
        tiny(dim=48, num_heads=2).load_ced_state_dict(tiny().state_dict())
    with pytest.raises(MlatrError, match="does not exist"):
        read_ced_checkpoint(tmp_path / "nothing.pt")


def test_padding_invariance_and_long_clips_in_eval():
    model = tiny(seed=10).eval()
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([24_000, 9_000, 1_000])  # 151 frames (3 chunks of 64), 57 frames, 7 frames
    wave = torch.randn(3, 24_000, generator=g) * (torch.arange(24_000)[None] < lengths[:, None])
    batch = model(wave, lengths)
    for i, n in enumerate(lengths.tolist()):
        alone = model(wave[i:i + 1, :n])
        valid = alone.mask[0]
        assert torch.allclose(alone.pooled[0], batch.pooled[i], atol=1e-5), i
        k = valid.shape[0]
        assert torch.equal(batch.mask[i, :k], valid) and not batch.mask[i, k:].any()
        assert torch.allclose(alone.frames[0][valid], batch.frames[i, :k][valid], atol=1e-5)
    assert batch.mask.sum(dim=1).tolist() == [2 * 4 + 1, 3, 1]  # 151 frames: 4 + 4 + 1 whole patches


def test_long_clip_is_the_mean_of_its_chunks():
    model = tiny(seed=11).eval()
    wave = torch.randn(1, 160 * 127)  # 128 frames = 2 chunks of 64
    out = model(wave)
    logmel, mask = model.frontend(wave)
    x = model.normalise_bins(logmel, mask)
    chunks = [model.encode_chunks(x[:, :, s:s + 64], torch.ones(1, 4, dtype=torch.bool)) for s in (0, 64)]
    expected = torch.stack([c.mean(dim=(1, 2)) for c in chunks]).mean(dim=0)
    assert torch.allclose(out.pooled, expected, atol=1e-5)
    assert out.frames.shape == (1, 8, 32)
    assert torch.allclose(out.frames[0, 4:], chunks[1].mean(dim=1)[0], atol=1e-5)


def test_training_batch_norm_uses_valid_frames_only():
    model = tiny(seed=12).train()
    lengths = torch.tensor([16_000, 4_000])
    wave = torch.randn(2, 16_000) * (torch.arange(16_000)[None] < lengths[:, None])
    logmel, mask = model.frontend(wave, lengths)
    values = logmel.permute(1, 0, 2)[:, mask]  # [M, valid frames]
    model(wave, lengths)
    assert torch.allclose(model.init_bn.running_mean, 0.01 * values.mean(dim=1), atol=1e-4)
    expected_var = 0.99 + 0.01 * values.var(dim=1, unbiased=True)
    assert torch.allclose(model.init_bn.running_var, expected_var, rtol=1e-4)


def test_freezing_options():
    frozen = tiny(freeze=True).train()
    assert not any(p.requires_grad for p in frozen.parameters())
    assert not frozen.init_bn.training
    last = tiny(train_last_blocks=1).train()
    trainable = {n for n, p in last.named_parameters() if p.requires_grad}
    assert trainable == {n for n, _ in last.named_parameters() if n.startswith(("blocks.1.", "norm."))}
    with pytest.raises(MlatrError, match="train_last_blocks"):
        tiny(train_last_blocks=3)


def test_gradient_checkpointing_gives_the_same_gradients():
    wave = torch.randn(2, 12_000)
    grads = []
    for ckpt in (False, True):
        model = tiny(seed=13, gradient_checkpointing=ckpt, dropout=0.0)
        model.train()
        model(wave).pooled.square().sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_config_rebuilds_through_the_registry():
    model = build_audio_encoder("ced-tiny", train_last_blocks=2)
    cfg = model.config()
    assert cfg["name"] == "ced-tiny" and cfg["dim"] == 192
    rebuilt = build_audio_encoder(**cfg)
    assert rebuilt.config() == cfg
    assert rebuilt.state_dict().keys() == model.state_dict().keys()


def test_key_names_are_the_original_repositorys():
    """Key names of RicherMans/CED's AudioTransformer (as its Zenodo checkpoints and the Hugging Face
    conversion script utils/convert_ced_original_to_pytorch.py name them), minus front end and head."""
    with torch.device("meta"):
        model = CEDAudioEncoder(size="base")
    expected = {"patch_embed.proj.weight", "patch_embed.proj.bias", "time_pos_embed", "freq_pos_embed",
                "norm.weight", "norm.bias"}
    expected |= {f"init_bn.1.{k}" for k in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")}
    for i in range(12):
        for part in ("norm1", "attn.qkv", "attn.proj", "norm2", "mlp.fc1", "mlp.fc2"):
            expected |= {f"blocks.{i}.{part}.weight", f"blocks.{i}.{part}.bias"}
    assert set(to_original_ced_keys(model.state_dict())) == expected
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert shapes["blocks.0.attn.qkv.weight"] == (2304, 768) and shapes["patch_embed.proj.weight"] == (768, 1, 16, 16)


def test_attention_is_standard_multi_head_attention():
    """The fused-qkv layout (q, k, v stacked; heads contiguous) equals torch's multi-head attention."""
    model = tiny(seed=14).eval()
    attn = model.blocks[0].attn
    x = torch.randn(2, 7, 32)
    keep = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    ours = attn(x, keep)
    ref, _ = torch.nn.functional.multi_head_attention_forward(
        x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), 32, 2, attn.qkv.weight, attn.qkv.bias,
        None, None, False, 0.0, attn.proj.weight, attn.proj.bias, training=False, key_padding_mask=~keep,
        need_weights=False)
    assert torch.allclose(ours, ref.transpose(0, 1), atol=1e-6)


def test_eager_attention_computes_what_sdpa_computes():
    """attention: eager (the original CED's form, score tensors kept) and sdpa give the same encoding,
    padded clips included; the option is stored in the config."""
    torch.manual_seed(0)
    fused = CEDAudioEncoder(size=None, dim=32, depth=2, num_heads=4).eval()
    eager = CEDAudioEncoder(size=None, dim=32, depth=2, num_heads=4, attention="eager").eval()
    eager.load_state_dict(fused.state_dict())
    wave, lengths = torch.randn(2, 16000), torch.tensor([16000, 9000])
    a, b = fused(wave, lengths), eager(wave, lengths)
    assert torch.allclose(a.pooled, b.pooled, atol=1e-5) and torch.allclose(a.frames, b.frames, atol=1e-5)
    assert eager.config()["attention"] == "eager"
    with pytest.raises(MlatrError, match="attention"):
        CEDAudioEncoder(size=None, dim=32, depth=1, num_heads=4, attention="flash")
