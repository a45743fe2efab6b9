HELP = """Fine-grained matching on the synthetic benchmark: cosine vs LGMM vs max/mean modes, CMSC ablation.

Trains one model per method (and seed) with the demo's setup (ML-CLAP pairing, same steps for all),
each with its matching head (fine-grained paper Table 2: pooled cosine, Max-Mean, Max-Max, Mean-Mean,
Mean-Max, LGMM, all with L_InterC) and LGMM with the CMSC terms (Table 3: L, -L_Jnt, -L_IntraC),
evaluates every model on the test split ranking with its own head, and writes OUT/report/summary.md,
results.json and word_to_clip.png (Figure 2: a caption's word-to-clip similarities against its clip
and two hard negatives). Rerunning the same command resumes: finished runs are skipped.

Examples:
  mlatr experiment finegrained --size tiny --methods cosine,lgmm       # smoke run
  mlatr experiment finegrained --size small --seeds 0,1 --out runs/finegrained
"""


def add_arguments(parser):
    from mlatr.experiments.demo import SIZES
    from mlatr.experiments.finegrained import METHODS

    parser.add_argument("--out", default="mlatr-finegrained", help="output folder (default: mlatr-finegrained)")
    parser.add_argument("--size", choices=sorted(SIZES), default="small",
                        help="benchmark size and epochs: " + "; ".join(
                            f"{k}: {v['train']}/{v['val']}/{v['test']} clips, {v['epochs']} epochs"
                            for k, v in SIZES.items()))
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default: 0)")
    parser.add_argument("--methods", default=",".join(METHODS),
                        help=f"comma-separated methods (default: all): {', '.join(METHODS)}")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args) -> int:
    from mlatr.errors import MlatrError
    from mlatr.experiments.finegrained import METHODS, run_finegrained

    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise MlatrError(f"--seeds: expected comma-separated integers, got {args.seeds!r}") from None
    if not seeds:
        raise MlatrError("--seeds: give at least one seed")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise MlatrError(f"--methods: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(METHODS)}")
    run_finegrained(args.out, size=args.size, seeds=seeds, methods=methods, progress=not args.no_progress)
    return 0
