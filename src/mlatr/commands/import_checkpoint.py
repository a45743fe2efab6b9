"""Convert another project's released checkpoint (or model folder) into an mlatr checkpoint.

--from hf-clap: a transformers ClapModel folder (LAION-CLAP: laion/clap-htsat-unfused, laion/larger_clap_general,
...; HTSAT audio + RoBERTa text + their projections) as a ready model with the embeddings of
ClapModel.get_audio_features / get_text_features, reading audio at the feature extractor's 48 kHz:
  mlatr import-checkpoint --from hf-clap weights/clap-htsat-unfused -o weights/laion-clap.pt
  mlatr eval --model weights/laion-clap.pt --manifest M --split test

--from mlclap: ML-CLAP's pretrain.pt (github.com/zyyan4/ml-clap; zenodo.org/records/13358171), the model
ATRI §5.3 starts KCL and CACL from: CED-Base audio encoder, SONAR text encoder, Linear-ReLU-Linear
projections to 1024-d. The SONAR tokenizer and architecture come from a local copy of its Hugging Face
port (--sonar, cointegrated/SONAR_200_text_encoder); the weights all come from FILE. Every key of FILE is
accounted for in the printed report (matched / set aside with the reason / unexpected / missing / shape
mismatch); any unexpected or missing key or shape mismatch stops the conversion unless --allow-unmatched.

The result works wherever an mlatr checkpoint does:
  mlatr eval --model OUT.pt --manifest M --split test
  mlatr index build --model OUT.pt --manifest M -o lib.idx.npz
  mlatr train --config configs/atri-kcl-audiocaps.yaml model.init_checkpoint=OUT.pt ...
Its stored training config is ATRI's (8 languages, 10 s clips, Adam 5e-6) and its temperature is fixed at
0.07 (ATRI §5.3); --keep-temperature keeps ML-CLAP's learnt one instead, as a learnable temperature.

Example:
  mlatr import-checkpoint --from mlclap weights/pretrain.pt --sonar weights/sonar -o weights/mlclap.pt
"""

from mlatr.commands._arg_types import positive_int
from mlatr.commands._outputs import Output
from mlatr.errors import MlatrError

HELP = __doc__


#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("output", "checkpoint", folder=False),)


def add_arguments(parser) -> None:
    parser.add_argument("file", metavar="FILE", help="the checkpoint to convert (hf-clap: the ClapModel folder)")
    parser.add_argument("--from", dest="source", required=True, choices=("mlclap", "hf-clap"),
                        help="whose checkpoint FILE is")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.pt", help="mlatr checkpoint to write")
    parser.add_argument("--sonar", metavar="DIR",
                        help="mlclap: local copy of cointegrated/SONAR_200_text_encoder (tokenizer + architecture)")
    parser.add_argument("--audio-heads", type=positive_int, default=None,
                        help="attention heads of the CED (default: from its published size, 12 for CED-Base)")
    parser.add_argument("--keep-temperature", action="store_true",
                        help="keep ML-CLAP's learnt temperature (learnable) instead of a fixed 0.07")
    parser.add_argument("--allow-unmatched", action="store_true",
                        help="convert even with unexpected / missing keys (reported; missing ones keep mlatr's "
                             "initial weights)")


def run(args) -> int:
    if args.source == "hf-clap":
        from mlatr.convert.hf_clap import import_hf_clap  # loads torch: not paid by every command's parser

        report = import_hf_clap(args.file, args.output)
        print(f"matched {report['matched']} key(s); temperature {report['temperature']:.4f}; feature extraction: "
              + ", ".join(f"{k} {v}" for k, v in report["features"].items()))
        for key, why in report["ignored"].items():
            print(f"  set aside {key}: {why}")
        print(f"wrote {args.output}")
        return 0
    from mlatr.convert.mlclap import ATRI_TEMPERATURE, import_mlclap  # loads torch: not paid by every command's parser

    if not args.sonar:
        raise MlatrError("import-checkpoint --from mlclap needs --sonar DIR (the SONAR tokenizer and architecture)")

    report = import_mlclap(args.file, args.output, args.sonar, audio_heads=args.audio_heads,
                           temperature=None if args.keep_temperature else ATRI_TEMPERATURE,
                           allow_unmatched=args.allow_unmatched)
    print(report.describe())
    print(f"wrote {args.output}")
    return 0 if report.ok else 1
