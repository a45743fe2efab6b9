"""Unpack the sound files of downloaded Debian packages into sound libraries, licence checked.

For every package of the package table (default: mlatr's own, src/mlatr/data/real_sound_packages.json; see
mlatr.data.debian_sounds) not unpacked yet, reads DEBS/PACKAGE_*.deb: its copyright file first (a package
whose licence does not allow redistribution of the sounds is refused: reported, not unpacked, listed under
"refused"), then the sound files its rule keeps into DEST/LIBRARY/ (written whole, then moved into place,
so a killed run leaves no half library), the copyright file into DEST/copyright/PACKAGE. Writes the licence
table DEST/licences.json (package, version, library, clips, licences, copyright holders). Run it again to
resume; a package already unpacked is skipped. scripts/get-real-sounds.sh downloads the packages and runs
this, then the import, the de-duplication, the captions and the splits.

Example:
  mlatr data unpack-debs data/real-sounds/debs data/real-sounds
"""

from pathlib import Path

from mlatr.data.debian_sounds import PACKAGES_PATH, load_rules, unpack_all

HELP = __doc__


def add_arguments(parser) -> None:
    parser.add_argument("debs", metavar="DEBS", help="folder of the downloaded .deb files")
    parser.add_argument("dest", metavar="DEST", help="folder of the sound libraries")
    parser.add_argument("--packages", default=None, help="package table (default: mlatr's real_sound_packages.json)")
    parser.add_argument("--list", action="store_true", help="print the table's package names and libraries, stop")


def run(args) -> int:
    rules = load_rules(args.packages or PACKAGES_PATH)
    if args.list:
        for rule in rules:
            print(rule.package, rule.library)
        return 0
    table = unpack_all(Path(args.debs), Path(args.dest), rules)
    clips = sum(row["clips"] for row in table["packages"])
    print(f"{args.dest}: {len(table['packages'])} packages, {clips} sound files; {len(table['refused'])} refused; "
          f"licence table {Path(args.dest) / 'licences.json'}")
    return 0
