import json

from mlatr.commands._arg_types import fraction, positive_int
from mlatr.commands._model_io import add_model_for_index_options, model_for_index
from mlatr.commands._paths import refuse_output_over_input
from mlatr.errors import MlatrError
from mlatr.search.backends import BACKENDS
from mlatr.search.evidence import describe_evidence
from mlatr.search.export import write_csv
from mlatr.search.fusion import RANKS
from mlatr.search.query_translation import TRANSLATE
from mlatr.search.results import below_words
from mlatr.terminal_text import shown

HELP = """Search an index: clips for a text query in any language, for a sound (--audio), or like one of its clips
(--like ID).

Text queries are encoded by the index's model with the language --lang (ISO 639-3 or 639-1) and
ranked by --rank: hybrid (default: the clips' sound, their captions' meaning in every language the index
holds, and caption keywords, fused by a model fitted on libraries never trained on), audio (sound only)
or captions (captions only). Each result carries its relevance, the probability that it answers the query
(calibrated for the index's model: its own calibration, fitted for its weights), and says why it matched
(caption, keyword, sound). The answer as a whole carries the probability that one of its results answers
(for --audio: the best result's relevance); below --min-relevance (default: the index's own level, fitted on
nonsense queries run against it) a line says "nothing relevant" before the closest results (--json:
"nothing_relevant": true, and "relevance"). A model without a calibration ranks all the same but gives no
relevance and says so ("calibrated": false).
The frozen multilingual text encoders (e5-small, use-multilingual) read any of their languages and need no
--lang (without it a query embeds as with any, and its keywords are matched with the stop words and stems of
every language); a text encoder that reads the language (SONAR, a small one trained with a language
embedding) refuses a query without --lang rather than guess it. The same holds for the Python API (lang=None)
and the server (no ?lang=): one default everywhere.
--audio FILE ranks the indexed clips by similarity to FILE and also the indexed captions
(sound-to-caption). --like ID ("more like this") ranks them by similarity to the indexed clip ID's stored
sound (no model run), the clip itself left out; a copy of its sound says so. --json prints one
JSON object instead of a table. --csv FILE also writes the results
for a spreadsheet, a sampler or a DAW's import: query, rank, id, path, score, relevance, duration, start, end
(where a long recording matched), caption (FILE -: to stdout, instead of the table).
A long recording indexed as segments (index build) is ranked by its best segment where that beats the whole
file, counts once, and its hit says where it matched: "at 1:40-1:50" (--json: "start", "end" in seconds).

A query in a language other than the captions' (--lang spa, English file names) is also read through its
translation into theirs where Apertium has the pair (--translate auto, the default; off: never): each clip's
caption and keyword evidence is the better of the query's and the translation's, its sound the query's own,
and a line above the results shows the translation (--json: "translated_query", null when not translated).

A text query may exclude words (-rooster, NOT rooster), require a phrase ("door slam") and offer
alternatives (glass OR ceramic), in any language (docs/hybrid-search.md). --where limits the results to
clips whose facets pass a filter, inside the ranking: duration<1.5s and channels=1, format in (wav, flac),
library=wesnoth, ucs_category=DOORS, loudness_lufs>-30, keywords has door, not silent. Silent clips are
left out of a text query's results unless --include-silent (or a --where that tests silent).

Examples:
  mlatr search sounds.idx "un chien aboie" --lang fra -k 5
  mlatr search sounds.idx --audio query.wav --json
  mlatr search sounds.idx "footsteps on snow" --backend faiss
  mlatr search sounds.idx "door creak" -k 50 --csv door-creaks.csv
  mlatr search sounds.idx "un chien qui aboie" --lang fra --rank audio
  mlatr search sounds.idx "bird -rooster"
  mlatr search sounds.idx '"door slam" -metal' --where "duration<2s and format in (wav, flac)"
  mlatr search sounds.idx --audio query.wav --where "channels=mono and library=foley"
  mlatr search sounds.idx --like DOORWood_Creak_01.wav -k 20 --where "duration<3s"
"""


def add_arguments(parser):
    parser.add_argument("index", metavar="INDEX", help="index written by mlatr index build")
    parser.add_argument("query", nargs="?", default=None, help="text query (omit with --audio or --like)")
    parser.add_argument("-k", type=positive_int, default=10, help="number of results (default 10)")
    parser.add_argument("--lang", default=None, help="language of the text query, ISO 639-3 or 639-1 (default: none "
                        "given, which a model whose text encoder reads the language refuses)")
    parser.add_argument("--audio", metavar="FILE", help="sound file to search with (sound-to-sound/caption)")
    parser.add_argument("--like", metavar="ID", default=None,
                        help="more like this: the clips whose sound is nearest to the indexed clip ID's (the id a "
                             "result shows)")
    parser.add_argument("--rank", choices=RANKS, default="hybrid",
                        help="text ranking: hybrid (sound + captions + keywords, default), audio or captions")
    parser.add_argument("--backend", choices=BACKENDS, default="auto",
                        help="auto: each shard's recorded approximate structure (HNSW / IVF-PQ, built by index "
                             "build for large shards) where it has one, else exact; numpy / faiss: exact")
    parser.add_argument("--min-relevance", type=fraction, default=None,
                        help="the probability that the library holds a relevant clip below which the answer "
                             "says 'nothing relevant' (0-1; default: the fitted threshold)")
    parser.add_argument("--where", metavar="FILTER", default=None,
                        help="only clips whose facets pass FILTER, e.g. \"duration<1 and channels=1\" (fields: "
                             "duration, sample_rate, bit_depth, channels, format, codec, file_size, loudness_lufs, "
                             "true_peak_dbtp, peak_dbfs, silent, folder, library, ucs_*, keywords, ...)")
    parser.add_argument("--include-silent", action="store_true",
                        help="a text query may return silent clips (left out by default)")
    parser.add_argument("--translate", choices=TRANSLATE, default="auto",
                        help="auto (default): a query in a language other than the captions' (--lang) is also read "
                             "through its translation into theirs where Apertium has the pair (apt-get install "
                             "apertium-eng-spa apertium-eng-cat), shown above the results; off: never")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--csv", metavar="FILE", default=None,
                        help="also write the results as CSV to FILE (-: to stdout, instead of the table)")
    add_model_for_index_options(parser)


def run(args) -> int:
    # these load torch: not paid by every command's parser
    from mlatr.audio.io import audio_duration
    from mlatr.models.protocols import query_languages
    from mlatr.search.index import Index
    from mlatr.search.query import text_query

    if sum(x is not None for x in (args.query, args.audio, args.like)) != 1:
        raise MlatrError("give one of a text QUERY, --audio FILE or --like ID")
    if args.query is None and args.include_silent:
        raise MlatrError("--include-silent is for a text query: a sound query (--audio, --like) keeps silent clips "
                         "already")
    if args.csv == "-" and args.json:
        raise MlatrError("--csv - and --json both print to stdout: give --csv a file")
    if args.csv not in (None, "-"):  # never over the index or the sound searched with
        refuse_output_over_input([("--csv", args.csv)], [("index", args.index), ("query sound", args.audio)])
    index = Index.load(args.index, backend=args.backend, model=model_for_index(args),
                       allow_other_model=args.allow_other_model)
    if args.audio is not None:
        clips = index.search_audio(args.audio, args.k, args.min_relevance, where=args.where)
        out = {"audio": args.audio, "k": args.k, **({"where": args.where} if args.where else {}), **clips.to_dict()}
    elif args.like is not None:
        clips = index.search_similar(clip_row(index, args.like), args.k, where=args.where)
        out = {"like": args.like, "k": args.k, **({"where": args.where} if args.where else {}), **clips.to_dict()}
    else:
        query = text_query(args.query, args.lang, args.k, args.rank,  # the one check of the query
                           query_languages(index.model().model.text_encoder), "--lang", args.min_relevance,
                           args.where, args.include_silent, args.translate)
        clips = index.search_query(query)
        out = {"query": args.query, "lang": query.lang, "k": args.k, "rank": args.rank,
               **({"where": args.where} if args.where else {}), **clips.to_dict()}
    if args.csv is not None:
        write_csv(args.csv, args.query or args.audio or f"like {args.like}", clips,
                  [audio_duration(h.path) for h in clips])
        if args.csv == "-":
            return 0
    if args.json:
        print(json.dumps(out, ensure_ascii=False, indent=1, allow_nan=False))  # strict JSON: hits hold no inf
        return 0
    if clips.translated_query is not None:
        print(f"translated query ({query.lang} -> {index.caption_language()}): {shown(clips.translated_query)}")
    if not clips.calibrated:
        print(f"relevance: not calibrated ({clips.uncalibrated}); the hits are ranked, without a probability")
    if clips.nothing_relevant:
        level = ("" if clips.relevance is None or clips.min_relevance is None
                 else f" ({below_words(clips.relevance, clips.min_relevance)})")
        print(f"nothing relevant: nothing in this library seems to match{level}; the closest ones:")
    same_words = (f"the same audio as {shown(args.like)}: a copy" if args.like is not None
                  else "the same audio as the query: your sound is in this library")
    print(f"{'rank':>4}  {'relev.':>6}  {'score':>6}  id / caption / path")
    for h in clips:
        cap = shown("; ".join(h.captions))
        rel = "-" if h.relevance is None else f"{h.relevance:.2f}"
        print(f"{h.rank:>4}  {rel:>6}  {h.score:6.3f}  {shown(h.id)}" + (f"  at {h.at()}" if h.segment else "")
              + (f"  \"{cap}\"" if cap else "")
              + f"\n{'':22}{shown(h.path)}"
              + (f"\n{'':22}(its audio was {h.stale} since it was indexed: mlatr index build --add updates the index)"
                 if h.stale else "")
              + (f"\n{'':22}({same_words})" if h.same_audio else ""))
        if h.evidence:
            print(f"{'':22}why: {shown(describe_evidence(h.evidence))}")
    if clips.caption_hits:
        print("\ncaptions of indexed clips:")
        for c in clips.caption_hits:
            print(f"{c.rank:>4}  {c.score:6.3f}  [{shown(c.lang)}] {shown(c.text)}  ({shown(c.id)})")
    return 0


def clip_row(index, clip_id: str) -> int:
    """The row of the live clip ``clip_id`` in ``index``, or an error naming it (and the index's size)."""
    row = index.tables.live_rows().get(clip_id)
    if row is None:
        raise MlatrError(f"--like: no clip {shown(clip_id)!r} in the index ({len(index):,} clips; an id is "
                         "what a search shows before a clip's caption)")
    return row
