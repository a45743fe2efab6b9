"""Which model a command or ``mlatr.load`` means: a path, a registered name, or the default.

A model is named the same way everywhere (``--model`` of every command, ``mlatr.load(...)``):

- a checkpoint file (``mlatr train``) or a model folder (``mlatr export``), by its path;
- a name from the local registry: a folder of model folders, ``$MLATR_MODELS`` when set, else
  ``$XDG_DATA_HOME/mlatr/models`` (``~/.local/share/mlatr/models``); ``mlatr export --name NAME`` writes
  ``REGISTRY/NAME``, ``mlatr models`` lists them. A path that exists wins over a name;
- nothing: the default, ``$MLATR_MODEL`` (a path or a name), else the ``model`` key of the nearest
  ``mlatr.toml`` found from the current folder upward (a relative path there is relative to that file's
  folder), the way git finds its repository, else the model that ships with mlatr (:data:`SHIPPED_MODEL`,
  also named :data:`SHIPPED_NAME`: the real-sound model ``mlatr demo-real`` trains, so that a library can be
  indexed and searched without training anything first).

This module imports nothing heavy (no torch): the command line resolves names before loading anything.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from mlatr.errors import InputError, MlatrError
from mlatr.file_kinds import special_file

#: The environment variable holding the default model (a path or a registered name).
MODEL_ENV = "MLATR_MODEL"
#: The environment variable naming the registry folder.
REGISTRY_ENV = "MLATR_MODELS"
#: The project file holding the default model (``model = "runs/demo-real/model.pt"``).
PROJECT_FILE = "mlatr.toml"
#: The keys a project file may hold.
PROJECT_KEYS = ("model",)
#: The largest project file read (it holds one line).
MAX_PROJECT_BYTES = 2**20
#: A registered model's name: letters, digits, ``.``, ``_``, ``-``; not starting with a dot.
NAME_PATTERN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")
#: The model folder that ships inside the package, and its name (docs/real-sounds.md: how it is rebuilt).
SHIPPED_NAME = "real-sounds"
SHIPPED_MODEL = Path(__file__).resolve().parent / "data" / "models" / SHIPPED_NAME


@dataclass(frozen=True)
class ModelRef:
    """A resolved model: its ``path`` (a checkpoint file or a model folder) and how it was found (``how``:
    ``"path"``, ``"registry"``, ``"$MLATR_MODEL"``, the project file's path or ``"the model shipped with mlatr"``)."""

    path: Path
    how: str

    def __str__(self) -> str:
        return str(self.path)


def registry_folder() -> Path:
    """The registry: ``$MLATR_MODELS``, else ``$XDG_DATA_HOME/mlatr/models``, else ``~/.local/share/mlatr/models``."""
    if os.environ.get(REGISTRY_ENV):
        return Path(os.environ[REGISTRY_ENV]).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data).expanduser() / "mlatr" / "models"


def check_model_name(name: str) -> str:
    """``name`` when it can name a registered model (a folder name, no path part), else an error."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise MlatrError(f"model name {name!r}: use letters, digits, '.', '_' and '-' (at most 100, no '/', not "
                         "starting with a dot)")
    return name


def registered_models() -> dict[str, Path]:
    """``{name: folder}`` of the registry's model folders (those with a ``config.json``), sorted by name; the
    shipped model (:data:`SHIPPED_NAME`) too, unless the registry holds one of that name."""
    folder = registry_folder()
    found = {SHIPPED_NAME: SHIPPED_MODEL} if (SHIPPED_MODEL / "config.json").is_file() else {}
    if folder.is_dir():
        found.update({p.name: p for p in folder.iterdir()
                      if NAME_PATTERN.fullmatch(p.name) and (p / "config.json").is_file()})
    return dict(sorted(found.items()))


def registered_path(name: str) -> Path:
    """Where model ``name`` is (or will be) registered: ``REGISTRY/NAME``."""
    return registry_folder() / check_model_name(name)


def find_project_file(start: str | os.PathLike | None = None) -> Path | None:
    """The nearest ``mlatr.toml`` in ``start`` (default: the current folder) or a folder above it; one that is
    there but is no regular file (a FIFO, a device, a folder, a link to nowhere or to itself) is an error, never
    opened and never passed over for one further up."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / PROJECT_FILE
        if candidate.is_file():
            return candidate
        if os.path.lexists(candidate):
            what = special_file(candidate) or ("a folder" if candidate.is_dir() else "a link to nothing readable")
            raise InputError(f"not a regular file but {what} (a project file holds model = \"PATH\")",
                             str(candidate))
    return None


def project_model(path: Path) -> str | None:
    """The ``model`` of project file ``path``, a relative path made relative to the file's folder (a name is
    kept as it is when no such path exists); an unknown key or a value that is not a string is an error."""
    if path.stat().st_size > MAX_PROJECT_BYTES:
        raise InputError(f"{path.stat().st_size:,} bytes: a project file holds one line (at most "
                         f"{MAX_PROJECT_BYTES:,} bytes read)", str(path))
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"not a TOML file ({exc})", str(path)) from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise InputError("not a TOML file mlatr reads (nested too deeply)", str(path)) from None
    unknown = sorted(set(data) - set(PROJECT_KEYS))
    if unknown:
        raise InputError(f"unknown key (known: {', '.join(PROJECT_KEYS)})", str(path), field=unknown[0])
    value = data.get("model")
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InputError(f"expected a path or a registered model name (a string), found {value!r}", str(path),
                         field="model")
    beside = path.parent / Path(value).expanduser()
    return str(beside) if beside.exists() or not NAME_PATTERN.fullmatch(value) else value


def default_model() -> tuple[str, str] | None:
    """``(reference, where it was found)`` of the default model: ``$MLATR_MODEL``, else the nearest project
    file's ``model``, else the shipped model; None when none gives one."""
    if os.environ.get(MODEL_ENV):
        return os.environ[MODEL_ENV], f"${MODEL_ENV}"
    project = find_project_file()
    if project is not None:
        value = project_model(project)
        if value is not None:
            return value, str(project)
    if (SHIPPED_MODEL / "config.json").is_file():
        return str(SHIPPED_MODEL), "the model shipped with mlatr"
    return None


def no_model_message(option: str = "--model") -> str:
    """What to do when no model is given and there is no default."""
    return (f"no model given: pass {option} (a checkpoint file, a model folder or a registered name), set "
            f"${MODEL_ENV}, or write model = \"PATH\" in a {PROJECT_FILE} here or in a folder above")


def resolve_model(ref: str | os.PathLike | None, option: str = "--model") -> ModelRef:
    """The model ``ref`` names (see the module docstring); ``None``: the default. An error says what was looked
    for: the path, the registry's names, where the default came from."""
    how = "path"
    if ref is None:
        found = default_model()
        if found is None:
            raise MlatrError(no_model_message(option))
        ref, how = found
    text = os.fspath(ref)
    path = Path(text).expanduser()
    if path.exists():
        return ModelRef(path, how)
    if NAME_PATTERN.fullmatch(text):
        registered = registered_models().get(text)
        if registered is not None:
            return ModelRef(registered, "registry" if how == "path" else how)
    names = ", ".join(registered_models()) or "none yet (mlatr export --name NAME writes one)"
    source = "" if how == "path" else f" (the default, from {how})"
    raise MlatrError(f"{option} {text}{source}: file not found (a checkpoint file or model folder), and no model of "
                     f"that name in the registry {registry_folder()} (registered: {names})")
