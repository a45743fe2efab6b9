"""Sound libraries from Debian packages: which files of a package to keep, whether its licence lets them be
redistributed, and the licence table shipped beside the manifest (issue 35).

``scripts/get-real-sounds.sh`` downloads the ``.deb`` files (``apt-get download``) and hands them to
``mlatr data unpack-debs`` (:func:`unpack_all`). Each package of the table
(``real_sound_packages.json`` beside this module, :class:`PackageRule`) names its library (the first
folder of its clips' ids), the ``roots`` to read inside the package (a folder, or a folder inside a zip
archive the package ships: ``path/public.zip!audio``), and regular expressions over the path under the root:
``include`` (default: every sound file; files under :data:`MIN_SECONDS` are placeholders, never kept),
``exclude`` (music, speech, ...) and ``rename`` (``[pattern,
replacement]`` pairs, ``re.sub``, applied in turn). A symbolic link is copied (as the file it points to)
only where the rule says ``follow_links``.

Licences (:func:`check_licence`). The package's ``/usr/share/doc/PACKAGE/copyright`` is read before anything
is unpacked. In the machine-readable format (DEP-5), the stanzas that may cover the kept sounds are the
default stanza (``Files: *``), the stanzas whose patterns name a sound file, a sound folder or, by their
last path parts, one of the kept files: every licence of those stanzas must allow redistribution
(:func:`redistributable`: one alternative of an ``or`` enough, every part of an ``and`` needed; GPL, LGPL,
AGPL, CC-BY, CC-BY-SA, CC0, public domain, Expat/MIT, BSD, zlib, ISC, Apache, Artistic, WTFPL, OFL, MPL;
never NC, ND or a name not on the list, unless the table's ``accept`` names it with what the reviewer read).
A copyright file in free form needs the table's ``licence`` and an ``evidence`` phrase that must occur in
it. A refused package is not unpacked, is reported and listed under ``refused``.

The licence table ``DEST/licences.json`` (format ``mlatr-sound-licences-1``): ``packages`` = one object per
unpacked package: ``package``, ``version``, ``library``, ``clips`` (files kept), ``licences`` (the licence
expressions that may cover them), ``holders`` (the copyright lines of those stanzas, at most 8),
``copyright`` (the copied file, ``copyright/PACKAGE``); ``refused`` = ``[{package, reason}]``.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath

import soundfile as sf

from mlatr.errors import InputError, MlatrError
from mlatr.io_utils import atomic_write_json
from mlatr.json_input import read_format_json

PACKAGES_PATH = Path(__file__).resolve().parent / "real_sound_packages.json"
PACKAGES_FORMAT = "mlatr-sound-packages-1"
LICENCES_FORMAT = "mlatr-sound-licences-1"
SOUND_RE = re.compile(r"\.(wav|ogg|oga|mp3|flac)$", re.IGNORECASE)
#: Licence names allowing redistribution of the files (SPDX and Debian short names, case-insensitive).
FREE_LICENCES = re.compile(
    r"^(gnu )?(a?gpl|lgpl|gfdl|cc-by(-sa)?|cc0|public[- ]?domain|pd|expat|mit|x11|bsd|zlib|isc|apache|artistic|"
    r"clarified-artistic|wtfpl?|ofl|sil-ofl|mpl|bsl|boost|free-art-license|unlicense)([-. ].*)?$", re.IGNORECASE)
NOT_FREE = re.compile(r"(^|-)(nc|nd|noncommercial|noderivs?|non-free|proprietary)(-|$)", re.IGNORECASE)
#: A sound file shorter than this is a game's placeholder (a few samples), not a recording (the shortest real
#: clicks of the corpus last 2.5 ms).
MIN_SECONDS = 0.001
SOUND_FOLDERS = re.compile(r"(sound|sfx|audio|samples|drumkit|noise|wav|ogg)", re.IGNORECASE)


@dataclass(frozen=True)
class PackageRule:
    """What to keep of one package (see the module docstring)."""

    package: str
    library: str
    roots: list[str]
    to: list[str] = field(default_factory=list)
    include: str | list[str | None] | None = None
    exclude: list[str] = field(default_factory=list)
    rename: list[list[str]] = field(default_factory=list)
    licence: str | None = None
    evidence: str | None = None
    accept: dict[str, str] = field(default_factory=dict)
    #: Copy a symbolic link under a root as a file of its own when its target is a kept file.
    follow_links: bool = False
    note: str = ""

    def target(self, root_index: int, rel: str) -> str | None:
        """The path under the library folder of the file ``rel`` (under root ``root_index``), or None when
        the file is not kept."""
        if not SOUND_RE.search(rel):
            return None
        include = self.include[root_index] if isinstance(self.include, list) else self.include
        if include and not re.search(include, rel):
            return None
        if any(re.search(x, rel, re.IGNORECASE) for x in self.exclude):
            return None
        for pattern, repl in self.rename:
            rel = re.sub(pattern, repl, rel)
        prefix = self.to[root_index] if root_index < len(self.to) else ""
        return str(PurePosixPath(prefix) / rel) if prefix else rel


def load_rules(path: str | Path = PACKAGES_PATH) -> list[PackageRule]:
    """The package table (format ``mlatr-sound-packages-1``: ``packages`` = a list of rule objects)."""
    meta = read_format_json(path, PACKAGES_FORMAT, "sound package table")
    rules = []
    for n, obj in enumerate(meta.get("packages", [])):
        try:
            rules.append(PackageRule(**obj))
        except TypeError as exc:
            raise InputError(f"not a package rule: {exc}", str(path), field=f"packages[{n}]") from exc
    names = [r.library for r in rules]
    if len(set(names)) != len(names):
        raise InputError("two packages share a library folder", str(path), field="packages")
    return rules


# --- licences -----------------------------------------------------------------------------------------


@dataclass
class Stanza:
    files: list[str]
    licence: str
    holders: list[str]


def parse_copyright(text: str) -> list[Stanza] | None:
    """The ``Files`` stanzas of a machine-readable (DEP-5) copyright file; None for a free-form one."""
    if not re.match(r"\s*Format:", text):
        return None
    stanzas, current = [], {}
    key = None
    for line in text.splitlines() + [""]:
        if not line.strip():
            if "files" in current:
                stanzas.append(Stanza(current["files"].split(), current.get("license", "").split("\n")[0].strip(),
                                      [h.strip() for h in current.get("copyright", "").split("\n") if h.strip()]))
            current, key = {}, None
            continue
        if line[0] in " \t" and key:
            current[key] += "\n" + line.strip()
            continue
        k, _, v = line.partition(":")
        key = k.strip().lower()
        current[key] = v.strip()
    return stanzas


def redistributable(expression: str, accept: dict[str, str] | None = None) -> bool:
    """Whether a licence expression allows redistribution: some ``or`` alternative whose every ``and`` part is
    a free licence name (or one the table's ``accept`` names)."""
    accept = {k.lower() for k in (accept or {})}
    expression = re.sub(r"\bwith\b.*?(?=\b(or|and)\b|$)", "", expression, flags=re.IGNORECASE)  # exceptions add rights
    for alternative in re.split(r"\s+or\s+", expression.strip(), flags=re.IGNORECASE):
        parts = [p.strip(" ,()") for p in re.split(r"\s+and\s+|,", alternative, flags=re.IGNORECASE) if p.strip(" ,()")]
        if parts and all(p.lower() in accept or (FREE_LICENCES.match(p) and not NOT_FREE.search(p)) for p in parts):
            return True
    return False


def _covers(pattern: str, paths: Sequence[str]) -> bool:
    """A stanza pattern may cover a kept sound: ``*``, a sound file or folder, or one of ``paths`` by its tail."""
    if pattern == "*" or SOUND_RE.search(pattern.rstrip("*")) or SOUND_FOLDERS.search(pattern):
        return True
    parts = pattern.split("/")
    for k in range(len(parts)):
        tail = "/".join(parts[k:])
        if tail not in ("*", "") and any(fnmatch.fnmatch(p, "*/" + tail) or fnmatch.fnmatch(p, tail) for p in paths):
            return True
    return False


@dataclass
class LicenceCheck:
    licences: list[str]
    holders: list[str]
    refused: str | None = None


def check_licence(rule: PackageRule, copyright_text: str, kept: Sequence[str]) -> LicenceCheck:
    """The licences that may cover the kept files ``kept`` (paths inside the package) and whether all allow
    redistribution (``refused`` says why not)."""
    stanzas = parse_copyright(copyright_text)
    if stanzas is None:
        if not rule.licence or not rule.evidence:
            return LicenceCheck([], [], "the copyright file is not machine-readable and the package table gives no "
                                        "reviewed licence with its evidence")
        if rule.evidence.lower() not in " ".join(copyright_text.split()).lower():
            return LicenceCheck([rule.licence], [], f"the copyright file no longer says {rule.evidence!r}")
        holders = [m.strip() for m in re.findall(r"Copyright(?: \(C\))?:?\s*(.+)", copyright_text)][:8]
        ok = redistributable(rule.licence, rule.accept)
        return LicenceCheck([rule.licence], holders, None if ok else f"licence {rule.licence!r} is not redistributable")
    covering = [s for s in stanzas if any(_covers(p, kept) for p in s.files)]
    if not covering:
        return LicenceCheck([], [], "no stanza of the copyright file covers the sound files")
    licences = sorted({s.licence for s in covering})
    holders = list(dict.fromkeys(h for s in covering for h in s.holders))[:8]
    bad = [x for x in licences if not redistributable(x, rule.accept)]
    return LicenceCheck(licences, holders, f"licence {', '.join(bad)} is not known to allow redistribution"
                        if bad else None)


# --- unpacking ----------------------------------------------------------------------------------------


def deb_version(deb: Path) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), "Version"], check=True, capture_output=True,
                          text=True).stdout.strip()


def _deb_members(deb: Path) -> Iterator[tuple[tarfile.TarInfo, tarfile.TarFile]]:
    """The members of a ``.deb``'s data archive, streamed (``dpkg-deb --fsys-tarfile``)."""
    proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            for member in tar:
                yield member, tar
    finally:
        proc.stdout.close()
        if proc.wait() != 0:
            raise MlatrError(f"{deb}: dpkg-deb could not read the package (exit {proc.returncode})")


def _clean(name: str) -> str:
    return name[2:] if name.startswith("./") else name.lstrip("/")


def unpack_package(deb: Path, rule: PackageRule, dest: Path) -> dict:
    """Unpack the kept sounds of ``deb`` into ``dest/<library>/`` (written whole, then renamed into place) and its
    copyright file into ``dest/copyright/<package>``, after the licence check; returns the licence-table row.
    A refused package raises :class:`MlatrError` and writes nothing."""
    roots = [r.split("!", 1) for r in rule.roots]
    copyright_name = f"usr/share/doc/{rule.package}/copyright"
    work = Path(tempfile.mkdtemp(prefix=f".unpack-{rule.library}-", dir=dest))
    try:
        copyright_text, archives, kept = None, {}, []  # kept: (path inside package, target, data file)
        links = []  # (link path, its target inside the package, root index, target under the library)
        for member, tar in _deb_members(deb):
            name = _clean(member.name)
            if name == copyright_name and member.isfile():
                copyright_text = tar.extractfile(member).read().decode("utf-8", "replace")
                continue
            if member.issym() and rule.follow_links:
                for k, parts in enumerate(roots):
                    base = parts[0].strip("/")
                    if len(parts) == 1 and name.startswith(base + "/"):
                        target = rule.target(k, name[len(base) + 1:])
                        pointed = str(PurePosixPath(name).parent / member.linkname)
                        if target is not None:
                            links.append((name, os.path.normpath(pointed), target))
            if not member.isfile():
                continue
            for k, parts in enumerate(roots):
                base = parts[0].strip("/")
                if len(parts) == 2 and name == base:
                    path = work / f"archive-{k}"
                    with open(path, "wb") as fh:
                        shutil.copyfileobj(tar.extractfile(member), fh)
                    archives[k] = path
                elif len(parts) == 1 and name.startswith(base + "/"):
                    target = rule.target(k, name[len(base) + 1:])
                    if target is not None:
                        out = work / "files" / f"{len(kept)}"
                        out.parent.mkdir(parents=True, exist_ok=True)
                        with open(out, "wb") as fh:
                            shutil.copyfileobj(tar.extractfile(member), fh)
                        os.utime(out, (member.mtime, member.mtime))  # the package's time: a refetch is identical
                        kept.append((name, target, out))
        for k, path in archives.items():
            prefix = roots[k][1].strip("/")
            with zipfile.ZipFile(path) as z:
                for info in z.infolist():
                    if info.is_dir() or not info.filename.startswith(prefix + "/"):
                        continue
                    target = rule.target(k, info.filename[len(prefix) + 1:])
                    if target is not None:
                        out = work / "files" / f"{len(kept)}"
                        out.parent.mkdir(parents=True, exist_ok=True)
                        with z.open(info) as src, open(out, "wb") as fh:
                            shutil.copyfileobj(src, fh)
                        stamp = datetime(*info.date_time).timestamp()
                        os.utime(out, (stamp, stamp))
                        kept.append((f"{roots[k][0]}!{info.filename}", target, out))
        data_of = {path: data for path, _, data in kept}
        for name, pointed, target in links:
            if pointed in data_of:
                out = work / "files" / f"{len(kept)}"
                shutil.copy2(data_of[pointed], out)
                kept.append((name, target, out))
        if copyright_text is None:
            raise MlatrError(f"{rule.package}: refused: the package has no {copyright_name}")
        check = check_licence(rule, copyright_text, [k[0] for k in kept])
        if check.refused:
            raise MlatrError(f"{rule.package}: refused: {check.refused}")
        if not kept:
            raise MlatrError(f"{rule.package}: no sound file matches the package table's rule (roots "
                             f"{', '.join(rule.roots)})")
        kept = [k for k in kept if not _placeholder(k[2])]
        library = work / "library"
        targets = set()
        for _, target, data in kept:
            if target in targets:
                raise MlatrError(f"{rule.package}: two files would be written to {rule.library}/{target}")
            targets.add(target)
            (library / target).parent.mkdir(parents=True, exist_ok=True)
            data.rename(library / target)
        (dest / "copyright").mkdir(exist_ok=True)
        (dest / "copyright" / rule.package).write_text(copyright_text, encoding="utf-8")
        row = {"package": rule.package, "version": deb_version(deb), "library": rule.library, "clips": len(kept),
               "licences": check.licences, "holders": check.holders, "copyright": f"copyright/{rule.package}"}
        atomic_write_json(library / ".done", row)
        final = dest / rule.library
        if final.exists():
            shutil.rmtree(final)
        library.rename(final)
        return row
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _placeholder(path: Path) -> bool:
    """A file that decodes to less than :data:`MIN_SECONDS` (an unreadable one is left to the import to report)."""
    try:
        info = sf.info(str(path))
    except Exception:  # soundfile raises LibsndfileError / RuntimeError / TypeError: the import reports the file
        return False
    return info.frames < MIN_SECONDS * info.samplerate


def done_row(dest: Path, rule: PackageRule) -> dict | None:
    """The licence-table row of a package already unpacked (its ``.done`` marker), else None."""
    path = dest / rule.library / ".done"
    if not path.is_file():
        return None
    row = json.loads(path.read_text(encoding="utf-8"))
    return row if row.get("package") == rule.package else None


def unpack_all(debs: Path, dest: Path, rules: Sequence[PackageRule], log=None) -> dict:
    """Unpack every package of ``rules`` not unpacked yet from ``debs/<package>_*.deb``; a refused package is
    reported and skipped, a package without a ``.deb`` is an error. Writes ``dest/licences.json``; returns it."""
    log = log or (lambda message: print(message, file=sys.stderr))
    dest.mkdir(parents=True, exist_ok=True)
    for stale in dest.glob(".unpack-*"):  # a killed run's work folder
        shutil.rmtree(stale, ignore_errors=True)
    rows, refused = [], []
    for rule in rules:
        row = done_row(dest, rule)
        if row is None:
            found = sorted(debs.glob(f"{rule.package}_*.deb"))
            if not found:
                raise MlatrError(f"{rule.package}: no .deb in {debs} (apt-get download {rule.package})")
            try:
                row = unpack_package(found[-1], rule, dest)
                log(f"[real-sounds] {rule.package}: {row['clips']} sound files -> {rule.library}/ "
                    f"({'; '.join(row['licences'])})")
            except MlatrError as exc:
                refused.append({"package": rule.package, "reason": str(exc).split(": ", 1)[-1]})
                log(f"mlatr: warning: {exc}")
                continue
        rows.append(row)
    table = {"format": LICENCES_FORMAT, "packages": rows, "refused": refused}
    atomic_write_json(dest / "licences.json", table)
    return table


def read_licences(path: str | Path) -> dict:
    """A licence table written by :func:`unpack_all` (checked format)."""
    return read_format_json(path, LICENCES_FORMAT, "licence table")
