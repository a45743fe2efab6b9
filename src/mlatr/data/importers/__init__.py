"""Importers: one module per source format, each a function ``sources -> Manifest``.

Every malformed source row raises :class:`~mlatr.errors.InputError` naming file and line; with
``skip_bad=True`` it is skipped instead and listed in the returned manifest's ``problems``.

=================  =================================================================================
format             function
=================  =================================================================================
audiocaps-csv      :func:`~mlatr.data.importers.audiocaps.import_audiocaps_csv`
clotho-csv         :func:`~mlatr.data.importers.clotho.import_clotho_csv`
mlclap-json        :func:`~mlatr.data.importers.mlclap.import_mlclap_json`
translations       :func:`~mlatr.data.importers.translations.merge_translations` (into a manifest)
esc50-csv          :func:`~mlatr.data.importers.classification.import_esc50_csv`
urbansound8k-csv   :func:`~mlatr.data.importers.classification.import_urbansound8k_csv`
folder             :func:`~mlatr.data.importers.folder.import_folder`
=================  =================================================================================
"""

from __future__ import annotations

from mlatr.data.importers.audiocaps import import_audiocaps_csv
from mlatr.data.importers.classification import import_esc50_csv, import_urbansound8k_csv
from mlatr.data.importers.clotho import import_clotho_csv
from mlatr.data.importers.folder import import_folder
from mlatr.data.importers.mlclap import import_mlclap_json
from mlatr.data.importers.translations import merge_translations
from mlatr.data.sound_names import caption_from_name

#: format name -> (function, one-line description) for the formats that make a new manifest.
IMPORTERS = {
    "audiocaps-csv": (import_audiocaps_csv, "AudioCaps CSV: audiocap_id,youtube_id,start_time,caption"),
    "clotho-csv": (import_clotho_csv, "Clotho captions CSV: file_name,caption_1..caption_5"),
    "mlclap-json": (import_mlclap_json, 'ML-CLAP JSON: {"data": [{"id", "wav"|"audio", "caption_k", ...}]}'),
    "esc50-csv": (import_esc50_csv, "ESC-50 meta CSV: filename,fold,target,category,..."),
    "urbansound8k-csv": (import_urbansound8k_csv,
                         "UrbanSound8K CSV: slice_file_name,fsID,start,end,salience,fold,classID,class"),
    "folder": (import_folder, "a folder of sound files; captions from NAME.txt sidecars or file names"),
}

#: Every format ``mlatr data import`` accepts (webdataset: :func:`mlatr.data.webdataset_shards.import_webdataset`,
#: which also writes the shards' audio as files).
FORMATS = (*IMPORTERS, "translations", "webdataset")

__all__ = [
    "FORMATS", "IMPORTERS", "caption_from_name", "import_audiocaps_csv", "import_clotho_csv",
    "import_esc50_csv", "import_folder", "import_mlclap_json", "import_urbansound8k_csv",
    "merge_translations",
]
