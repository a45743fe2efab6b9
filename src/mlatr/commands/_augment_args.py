"""The augmentation options of the commands that train heads on frozen features (demo-real, learning-curve)."""

from mlatr.commands._arg_types import positive_int


def add_augment_arguments(parser) -> None:
    parser.add_argument("--augment", default=None, metavar="KINDS",
                        help="train the heads also on augmented views of the clips, computed once: comma-separated "
                             "gain, shift, mix (default: none)")
    parser.add_argument("--augment-views", type=positive_int, default=1,
                        help="with --augment: augmented views of every clip (default 1)")


def augment_kinds(args) -> tuple[str, ...]:
    """The kinds ``--augment`` names, checked (empty when not given)."""
    from mlatr.lab.augmented_views import Augmentation  # loads torch: only when the command runs

    return Augmentation.parse(args.augment).kinds if args.augment else ()
