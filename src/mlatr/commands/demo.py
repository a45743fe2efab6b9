HELP = """Offline demo: build the synthetic benchmark, train ML-CLAP, CACL and KCL, compare them.

Trains the three pairing schemes of ATRI with the same seed, model and step budget on the synthetic
multilingual benchmark (8 languages), evaluates each on the test split and prints the ATRI-style
tables (per-language recall, gap/dis, MRV, training overhead). Tables, plots and JSON go to
OUT/report. Rerunning the same command resumes: finished runs are skipped.

Examples:
  mlatr demo                          # small: a few minutes on a laptop CPU
  mlatr demo --size medium --seeds 0,1,2 --out runs/demo-medium
"""


def add_arguments(parser):
    from mlatr.experiments.demo import SIZES

    parser.add_argument("--out", default="mlatr-demo", help="output folder (default: mlatr-demo)")
    parser.add_argument("--size", choices=sorted(SIZES), default="small",
                        help="benchmark size and epochs: " + "; ".join(
                            f"{k}: {v['train']}/{v['val']}/{v['test']} clips, {v['epochs']} epochs"
                            for k, v in SIZES.items()))
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default: 0)")
    parser.add_argument("--schemes", default="mlclap,cacl,kcl", help="pairing schemes to compare")
    parser.add_argument("--epochs", type=int, help="training epochs (default: the size's)")
    parser.add_argument("--base", choices=["infonce", "siglip"], default="infonce", help="base loss")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args) -> int:
    from mlatr.errors import MlatrError
    from mlatr.experiments.demo import run_demo

    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise MlatrError(f"--seeds: expected comma-separated integers, got {args.seeds!r}") from None
    schemes = [s.strip() for s in args.schemes.split(",") if s.strip()]
    for s in schemes:
        if s not in ("mlclap", "cacl", "kcl"):
            raise MlatrError(f"--schemes: unknown scheme {s!r} (mlclap, cacl, kcl)")
    run_demo(args.out, size=args.size, seeds=seeds, schemes=schemes, base=args.base,
             progress=not args.no_progress, epochs=args.epochs)
    return 0
