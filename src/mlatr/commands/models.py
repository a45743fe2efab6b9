import json

from mlatr.json_input import read_format_json
from mlatr.model_registry import (
    MODEL_ENV,
    PROJECT_FILE,
    REGISTRY_ENV,
    SHIPPED_NAME,
    default_model,
    registered_models,
    registry_folder,
)
from mlatr.terminal_text import shown

HELP = f"""List the models of the local registry and say which model is the default.

The registry is a folder of model folders (${REGISTRY_ENV}, else ~/.local/share/mlatr/models);
`mlatr export --model MODEL --name NAME` adds one, after which --model NAME (every command) and
mlatr.load("NAME") find it. The default model, used when a command is given no --model, is
${MODEL_ENV} (a path or a name), else model = "..." in the nearest {PROJECT_FILE} (this folder or one
above; a relative path there is relative to the file), else the model that ships with mlatr ({SHIPPED_NAME}).

Example:
  mlatr models
  mlatr models --json
"""


def add_arguments(parser):
    parser.add_argument("--json", action="store_true", help="print JSON")


def describe(folder) -> dict:
    """Name, folder and encoders of a registered model folder (what its config.json says)."""
    config = read_format_json(folder / "config.json", "mlatr-model-1",
                              "an mlatr model config (written by mlatr export)")
    model = config.get("model_config") or {}
    return {"folder": str(folder), "audio_encoder": (model.get("audio_encoder") or {}).get("name"),
            "text_encoder": (model.get("text_encoder") or {}).get("name"), "dim": model.get("embed_dim")}


def run(args) -> int:
    models = {name: describe(folder) for name, folder in registered_models().items()}
    default = default_model()
    if args.json:
        print(json.dumps({"registry": str(registry_folder()), "models": models,
                          "default": None if default is None else {"model": default[0], "from": default[1]}},
                         ensure_ascii=False, indent=1))
        return 0
    print(f"registry: {shown(str(registry_folder()))}")
    if not models:
        print("  (no model yet: mlatr export --model MODEL --name NAME)")
    for name, info in models.items():
        print(f"  {shown(name)}\t{info['audio_encoder']} + {info['text_encoder']}, dim {info['dim']}\t"
              f"{shown(info['folder'])}")
    print(f"default: {shown(default[0])} (from {shown(default[1])})" if default else
          f"default: none (set ${MODEL_ENV} or write model = \"PATH\" in {PROJECT_FILE})")
    return 0
