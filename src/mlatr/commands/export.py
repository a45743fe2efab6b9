HELP = """Write a model as a folder other tools can read: config.json + model.safetensors (no pickle).

The folder holds the model's config, its weights (the Hugging Face layout), the matching head it ranks
with and its data settings; nothing of the training run. mlatr.load(DIR), --model DIR (search, serve,
embed, classify) and --checkpoint DIR (eval, encode, index build) read it, with the same embeddings as
the checkpoint.

Example:
  mlatr export runs/demo-real/model.pt -o models/demo-real
"""


def add_arguments(parser):
    parser.add_argument("checkpoint", metavar="CKPT", help="a checkpoint written by mlatr train (or a model folder)")
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="folder to write")


def run(args) -> int:
    from mlatr.inference import export_model  # loads torch: not paid by every command's parser

    folder = export_model(args.checkpoint, args.output)
    print(f"wrote {folder}/config.json and {folder}/model.safetensors")
    return 0
