from mlatr.commands._arg_types import positive_float, positive_int
from mlatr.commands._model_io import add_model_option, encode_from_args
from mlatr.commands._outputs import Output
from mlatr.commands._paths import model_inputs, refuse_output_over_input

HELP = """Encode a manifest split (or webdataset shards' with --webdataset) with a trained model into an
evaluation NPZ (or Parquet).

The NPZ holds audio [Na, D], text [Nt, D], text_audio, text_lang, text_group (the arrays
`mlatr eval-embeddings` reads) plus clip_ids and texts. With -o FILE.parquet (needs pyarrow: pip install
'mlatr[parquet]'), one row per clip: id, path, embedding (list of D floats); the captions' embeddings are
not written there (use `mlatr embed --text` for texts).

Examples:
  mlatr encode --model runs/kcl/best.pt --manifest data/synth/manifest.jsonl --split test -o emb.npz
  mlatr encode --model runs/kcl/best.pt --manifest data/synth/manifest.jsonl --split all -o emb.parquet
"""


#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("output", "embeddings file", folder=False),)


def add_arguments(parser):
    add_model_option(parser)
    clips = parser.add_mutually_exclusive_group(required=True)
    clips.add_argument("--manifest", help="JSONL manifest")
    clips.add_argument("--webdataset", metavar="SHARDS",
                       help="webdataset shards instead of a manifest: DIR/shard-{000000..000009}.tar (any fsspec URL)")
    parser.add_argument("--split", default="test", help="split to encode (default: test); 'all' for every clip")
    parser.add_argument("-o", "--output", required=True, help="output .npz or .parquet")
    parser.add_argument("--languages", help="comma-separated languages (default: the model's training languages)")
    parser.add_argument("--batch-size", type=positive_int, default=64)
    parser.add_argument("--max-seconds", type=positive_float, default=None,
                        help="centre crop (default: the training config's)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--skip-bad", action="store_true", help="skip unreadable audio and count it")


def run(args) -> int:
    # loads torch: not paid by every command's parser
    from mlatr.inference.tables import is_parquet, require_parquet, write_embeddings_parquet

    refuse_output_over_input([("-o", args.output)], model_inputs(args))
    if is_parquet(args.output):
        require_parquet()
    enc = encode_from_args(args)
    if is_parquet(args.output):
        write_embeddings_parquet(args.output, enc.clip_ids, enc.clip_paths, enc.audio)
    else:
        enc.save_npz(args.output)
    print(f"wrote {args.output}: {enc.audio.shape[0]} clips, {enc.text.shape[0]} captions, "
          f"dim {enc.audio.shape[1]}" + (f"; skipped {len(enc.skipped)} unreadable clips" if enc.skipped else ""))
    return 0
