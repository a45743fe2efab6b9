"""An optimised CPU runtime for a frozen audio encoder's heavy part: exported once, cached, checked against torch.

PyTorch stays the reference. An audio encoder that offers a part for it (``runtime_part()``: aiSFX's CNN, from
spectrogram blocks to block embeddings, :meth:`mlatr.models.aisfx.AisfxEncoder.runtime_part`) may have that part
run by ONNX Runtime (``onnxruntime``) or OpenVINO (``openvino``), which the optional extra ``mlatr[fast]``
installs; the front end, the pooling and the projection stay in torch. :func:`attach_runtime`:

1. exports the part once to ONNX (``torch.onnx``) into the cache folder
   (:func:`mlatr.models.use_prepared.cache_dir` / ``runtimes/KEY``, ``KEY`` the SHA-256 of the part's weights),
   and for ``int8`` a statically quantised copy (ONNX Runtime's QDQ quantisation, calibrated on the blocks of
   the calibration clips given, per-channel int8 weights, uint8 activations; its own key adds the calibration's);
2. runs the part both ways on check blocks (the calibration clips', else a fixed seeded set) and refuses a runtime
   whose vectors fall below :data:`MIN_COSINE` of torch's for its precision (``auto`` falls back to torch);
3. sets the encoder's ``block_runner`` to a :class:`Runner`, which each process (a worker forked or spawned by
   :mod:`mlatr.inference.worker_pool`) opens for itself on the torch threads that process was given.

``fp32`` is the default precision and equal to torch (cosine :data:`MIN_COSINE` ``["fp32"]`` or more, tested);
``bf16`` (OpenVINO, on CPUs with AMX or AVX-512 BF16) and ``int8`` are opt-in, their retrieval cost measured in
docs/measured-figures.md. ``auto`` picks OpenVINO, else ONNX Runtime, else torch, by what is installed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mlatr.errors import MlatrError
from mlatr.inference.model_identity import weights_sha256
from mlatr.io_utils import atomic_write_json
from mlatr.models.use_prepared import cache_dir

RUNTIMES = ("auto", "torch", "onnxruntime", "openvino")
PRECISIONS = ("fp32", "bf16", "int8")
#: The least cosine between a runtime's block embeddings and torch's, per precision (int8: a guard against a
#: broken quantisation; a near-silent block loses most, its retrieval cost is measured in docs/measured-figures.md).
MIN_COSINE = {"fp32": 0.9999, "bf16": 0.999, "int8": 0.95}
#: Which precision each runtime offers.
OFFERS = {"torch": ("fp32",), "onnxruntime": ("fp32", "int8"), "openvino": ("fp32", "bf16", "int8")}
#: What to install for a runtime.
INSTALL = {"onnxruntime": "pip install 'mlatr[fast]' (onnxruntime, onnx)",
           "openvino": "pip install 'mlatr[fast]' (openvino, onnxruntime and onnx for the export and int8)"}
#: Bumped when the export changes (a new key: files exported before are not reused).
EXPORT_VERSION = 1
#: Calibration blocks used at most for int8 (and for the check).
CALIBRATION_BLOCKS = 256


@dataclass(frozen=True)
class RuntimeChoice:
    """What runs the audio encoder's heavy part: ``runtime`` / ``precision``, the least ``cosine`` of its block
    embeddings against torch's on the check blocks (1.0 for torch), its files and why it was chosen."""

    runtime: str
    precision: str
    cosine: float = 1.0
    folder: str | None = None
    note: str = ""

    @property
    def name(self) -> str:
        return "torch" if self.runtime == "torch" else f"{self.runtime}/{self.precision}"


def installed(runtime: str) -> bool:
    """Whether ``runtime``'s package is importable (torch always is)."""
    module = {"onnxruntime": "onnxruntime", "openvino": "openvino"}.get(runtime)
    return module is None or importlib.util.find_spec(module) is not None


def _require(runtime: str) -> None:
    if not installed(runtime):
        raise MlatrError(f"--runtime {runtime}: the {runtime} package is not installed: {INSTALL[runtime]}")
    if importlib.util.find_spec("onnx") is None:
        raise MlatrError(f"--runtime {runtime}: exporting the encoder needs the onnx package: {INSTALL[runtime]}")


class Runner:
    """``blocks [N, 1, 100, 96] -> embeddings [N, 512]`` by ``runtime`` from the ONNX file ``path``; the session
    is opened in the process that calls it (never shared across a fork), on that process's torch threads (opened
    again when they change)."""

    def __init__(self, runtime: str, path: str, precision: str):
        self.runtime, self.path, self.precision = runtime, path, precision
        self._session = None
        self._pid = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_session": None, "_pid": None}

    def _open(self):
        threads = torch.get_num_threads()
        if self.runtime == "onnxruntime":
            import onnxruntime as ort  # optional extra (mlatr[fast]), checked by attach_runtime

            options = ort.SessionOptions()
            options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
            session = ort.InferenceSession(self.path, options, providers=["CPUExecutionProvider"])
            name = session.get_inputs()[0].name
            return lambda x: session.run(None, {name: x})[0]
        import openvino as ov  # optional extra (mlatr[fast]), checked by attach_runtime

        hint = "bf16" if self.precision == "bf16" else "f32"  # int8: the quantised model's own int8 parts
        compiled = ov.Core().compile_model(self.path, "CPU", {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1,
                                                               "INFERENCE_PRECISION_HINT": hint,
                                                               "PERFORMANCE_HINT": "LATENCY"})
        request, output = compiled.create_infer_request(), compiled.output(0)
        return lambda x: request.infer({0: x})[output]

    def __call__(self, blocks: torch.Tensor) -> torch.Tensor:
        opened_for = (os.getpid(), torch.get_num_threads())
        if self._pid != opened_for:  # another process, or another share of the cores
            self._session, self._pid = self._open(), opened_for
        out = self._session(np.ascontiguousarray(blocks.detach().cpu().numpy(), dtype=np.float32))
        return torch.from_numpy(np.array(out, dtype=np.float32, copy=True)).to(blocks.device)


def _export(module: torch.nn.Module, example: torch.Tensor, path: Path) -> None:
    """The part as ONNX at ``path`` (batch dimension dynamic), written whole or not at all."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with warnings.catch_warnings():  # the TorchScript exporter announces its successor; its output is what we want
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (example,), str(tmp), input_names=["blocks"], output_names=["embeddings"],
                          dynamic_axes={"blocks": {0: "n"}, "embeddings": {0: "n"}}, opset_version=17, dynamo=False)
    os.replace(tmp, path)


def _quantise(fp32: Path, path: Path, calibration: np.ndarray) -> None:
    """A static int8 (QDQ) copy of ``fp32`` at ``path``, calibrated on ``calibration`` blocks."""
    from onnxruntime.quantization import (  # optional extra (mlatr[fast])
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process  # optional extra, as above

    class Blocks(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([calibration[i:i + 16] for i in range(0, len(calibration), 16)])

        def get_next(self):
            batch = next(self.batches, None)
            return None if batch is None else {"blocks": batch}

    pre = path.with_name(f".{path.name}.{os.getpid()}.pre.onnx")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        quant_pre_process(str(fp32), str(pre))
        quantize_static(str(pre), str(tmp), Blocks(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        os.replace(tmp, path)
    finally:
        for leftover in (pre, tmp):
            leftover.unlink(missing_ok=True)


def check_blocks(encoder, calibration: Sequence[np.ndarray] | None, sample_rate: int) -> np.ndarray:
    """Spectrogram blocks ``[n, 1, 100, 96]`` to check (and calibrate) a runtime on: those of the calibration
    clips (mono waveforms at ``sample_rate``), else of a fixed seeded set of tones and noise."""
    if not calibration:
        rng = np.random.default_rng(0)
        t = np.arange(6 * sample_rate) / sample_rate
        calibration = [(0.3 * np.sin(2 * np.pi * f * t) * (t % 1 < 0.6) + 0.05 * rng.standard_normal(t.size))
                       .astype(np.float32) for f in (110, 440, 1760, 7000)]
        calibration += [(0.2 * rng.standard_normal(2 * sample_rate)).astype(np.float32)]
    blocks = []
    with torch.no_grad():
        for wave in calibration:
            x, _ = encoder.stage_blocks(torch.from_numpy(np.asarray(wave, np.float32))[None], None, 0)
            blocks.append(x.numpy())
    out = np.concatenate(blocks)
    return out[np.linspace(0, len(out) - 1, min(len(out), CALIBRATION_BLOCKS)).round().astype(int)]


def calibration_waves(clips, count: int = 32) -> list[np.ndarray]:
    """Up to ``count`` readable clips spread over ``clips`` (a :class:`~mlatr.inference.audio.Clips`): what int8 is
    calibrated on."""
    rows = sorted(set(np.linspace(0, len(clips) - 1, min(count, len(clips))).round().astype(int).tolist()))
    return [w for w in (clips.read(r) for r in rows) if w is not None]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))).min())


def attach_runtime(encoder, runtime: str = "auto", precision: str = "fp32",
                   calibration: Sequence[np.ndarray] | None = None, sample_rate: int = 16000,
                   root: str | os.PathLike | None = None) -> RuntimeChoice:
    """Run ``encoder``'s heavy part by ``runtime`` at ``precision`` (see the module docstring); ``calibration``:
    mono waveforms at ``sample_rate`` that int8 is calibrated and every runtime is checked on; ``root``: where
    exported files are kept (default the cache folder's ``runtimes``). Returns what was chosen."""
    if runtime not in RUNTIMES:
        raise MlatrError(f"--runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}")
    if precision not in PRECISIONS:
        raise MlatrError(f"--precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if hasattr(encoder, "block_runner"):
        encoder.block_runner = None
    part = encoder.runtime_part() if hasattr(encoder, "runtime_part") else None
    chosen_by = runtime
    if runtime == "auto":
        found = [r for r in ("openvino", "onnxruntime") if installed(r) and precision in OFFERS[r]]
        if part is None or not found or importlib.util.find_spec("onnx") is None:
            if precision != "fp32":
                raise MlatrError(f"--precision {precision} needs an optimised runtime: {INSTALL['openvino']}")
            return RuntimeChoice("torch", "fp32", note="no optimised runtime installed" if part else
                                 "this encoder has no part an optimised runtime runs")
        runtime = found[0]
    if runtime == "torch":
        if precision != "fp32":
            raise MlatrError(f"--precision {precision} needs an optimised runtime (--runtime openvino or onnxruntime)")
        return RuntimeChoice("torch", "fp32")
    if precision not in OFFERS[runtime]:
        raise MlatrError(f"--runtime {runtime} offers {', '.join(OFFERS[runtime])}, not {precision}")
    if part is None:
        raise MlatrError(f"--runtime {runtime}: this audio encoder has no part an optimised runtime runs (aisfx has)")
    _require(runtime)
    if precision == "int8" and importlib.util.find_spec("onnxruntime") is None:
        raise MlatrError(f"--precision int8 is quantised by onnxruntime: {INSTALL['onnxruntime']}")
    module, example = part
    folder = Path(root) if root is not None else cache_dir() / "runtimes"
    key = hashlib.sha256(f"{weights_sha256(module.state_dict())}-{EXPORT_VERSION}".encode()).hexdigest()[:20]
    folder = folder / key
    folder.mkdir(parents=True, exist_ok=True)
    fp32 = folder / "model.onnx"
    if not fp32.is_file():
        _export(module, example, fp32)
    blocks = check_blocks(encoder, calibration, sample_rate)
    path = fp32
    if precision == "int8":
        calib_key = hashlib.sha256(blocks.tobytes()).hexdigest()[:12]
        path = folder / f"model.int8-{calib_key}.onnx"
        if not path.is_file():
            _quantise(fp32, path, blocks)
    runner = Runner(runtime, str(path), precision)
    cosine = _checked_cosine(folder, runner, module, blocks)
    if cosine < MIN_COSINE[precision]:
        message = (f"--runtime {runtime} --precision {precision}: its block embeddings differ from torch's (least "
                   f"cosine {cosine:.6f} < {MIN_COSINE[precision]})")
        if chosen_by == "auto":
            return RuntimeChoice("torch", "fp32", note=message)
        raise MlatrError(message + "; use --runtime torch")
    encoder.block_runner = runner
    return RuntimeChoice(runtime, precision, cosine, str(folder), note=f"checked on {len(blocks)} blocks")


def _checked_cosine(folder: Path, runner: Runner, module: torch.nn.Module, blocks: np.ndarray) -> float:
    """The least cosine between ``runner``'s and torch's embeddings of ``blocks``, measured once per runtime,
    file and set of blocks (kept in ``folder``)."""
    key = hashlib.sha256(f"{runner.runtime}-{runner.precision}-{runner.path}".encode() + blocks.tobytes()).hexdigest()
    record = folder / f"check-{key[:16]}.json"
    if record.is_file():
        return float(json.loads(record.read_text(encoding="utf-8"))["cosine"])
    with torch.no_grad():
        want = module(torch.from_numpy(blocks)).numpy()
    cosine = _cosine(runner(torch.from_numpy(blocks)).numpy(), want)
    atomic_write_json(record, {"runtime": runner.runtime, "precision": runner.precision, "file": Path(runner.path).name,
                               "blocks": int(len(blocks)), "cosine": cosine})
    return cosine
