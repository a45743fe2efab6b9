HELP = """SupCLAP experiments: InfoNCE / SigLIP / CACL with and without support vector regularization.

Builds the synthetic multilingual benchmark, trains every method with the demo's model and step budget
(InfoNCE, SigLIP, each + bi-StaticSVR and + bi-DynamicSVR; CACL + SVR; the uni/bi x constraint ablation;
Simple Reweight), evaluates each on the test split and writes OUT/report/summary.md with the tables
(mean ± std over seeds) and figures: trajectory drift, semantic radius, positive-pair similarity,
convergence. Rerunning the same command resumes: finished runs are skipped.

Examples:
  mlatr experiment supclap --size small --out runs/supclap
  mlatr experiment supclap --size small --seeds 0,1,2 --methods infonce,infonce-bi-dynamic
  mlatr experiment supclap --size small --report-only     # tables of whatever has finished
"""


def add_arguments(parser):
    from mlatr.experiments.demo import SIZES
    from mlatr.experiments.supclap import METHODS

    parser.add_argument("--out", default="mlatr-supclap", help="output folder (default: mlatr-supclap)")
    parser.add_argument("--size", choices=sorted(SIZES), default="small",
                        help="benchmark size and epochs: " + "; ".join(
                            f"{k}: {v['train']}/{v['val']}/{v['test']} clips, {v['epochs']} epochs"
                            for k, v in SIZES.items()))
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default: 0)")
    parser.add_argument("--methods", default=",".join(METHODS),
                        help="comma-separated methods (default: all): " + ", ".join(METHODS))
    parser.add_argument("--report-only", action="store_true",
                        help="train nothing: report the finished runs of --methods found in OUT (any seed)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args) -> int:
    from mlatr.errors import MlatrError
    from mlatr.experiments.supclap import METHODS, run_supclap

    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise MlatrError(f"--seeds: expected comma-separated integers, got {args.seeds!r}") from None
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods or not seeds:
        raise MlatrError(f"--methods: unknown {unknown} (known: {', '.join(METHODS)})" if unknown
                         else "--methods and --seeds must not be empty")
    run_supclap(args.out, size=args.size, seeds=seeds, methods=methods, progress=not args.no_progress,
                report_only=args.report_only)
    return 0
