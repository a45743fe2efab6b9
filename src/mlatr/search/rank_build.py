"""An index build split over processes (``torchrun --nproc_per_node=N -m mlatr index build ...``).

Every process reads the same manifest and the same existing index, so all of them plan the same list of
new clips. Process ``r`` of ``N`` encodes the ``r``-th contiguous part of that list and writes it as its
own shard, named after the plan (a hash of the checkpoint, the settings and the new clips' ids) and its
rank: ``shard-P<plan>-r<r>of<N>``. After a barrier the first process takes the writer lock, re-reads the
manifest, marks deleted the rows of clips encoded again or gone, appends the shards in rank order and
writes the manifest: the index equals the one-process build's (same rows in the same order; several
shards instead of one). A killed run started again with the same command and the same ``N`` plans the
same shards and keeps those already written (a shard folder appears only when complete), so only the
missing parts are encoded again.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence

from mlatr.data.manifest import Clip
from mlatr.errors import MlatrError
from mlatr.inference.process_group import DistContext
from mlatr.search.build import BuildJob, BuildReport
from mlatr.search.index import Index
from mlatr.search.library_encoding import encode_clips, finished_encoding

#: What a rank shard records beside its arrays: its manifest entry and the clips it skipped.
ENTRY = "entry.json"


def plan_key(meta: dict, clips: Sequence[Clip], world: int, dtype: str) -> str:
    """A short hash naming one planned build (same inputs, same name: how a resumed run finds its shards)."""
    what = json.dumps([meta["checkpoint"]["sha256"], meta["sample_rate"], meta["max_seconds"],
                       meta.get("window_seconds"), meta["caption_languages"], world, dtype, [c.id for c in clips]]
                      + ([meta["segments"]] if meta.get("segments") else []))
    return hashlib.sha256(what.encode()).hexdigest()[:12]


def rank_slice(n: int, rank: int, world: int) -> slice:
    """The contiguous part of ``n`` items process ``rank`` of ``world`` takes (sizes differ by one at most)."""
    per, extra = divmod(n, world)
    start = rank * per + min(rank, extra)
    return slice(start, start + per + (1 if rank < extra else 0))


def build_by_rank(ctx: DistContext, job: BuildJob) -> BuildReport | None:
    """Encode this process's part of the job's new clips into its shard, then (first process) merge the shards
    into the job's index (its storage's :meth:`~mlatr.search.shards.FolderStorage.merge_parts`); the first
    process returns the report once the merge is done, the others None."""
    storage = job.storage
    if not storage.splits_over_processes:
        raise MlatrError("a build split over processes (torchrun) writes an index folder: give -o a name "
                         "not ending in .npz (each process writes its own shard)")
    output, clips = storage.path, job.plan.new
    key = plan_key(job.meta, clips, ctx.world_size, job.dtype)
    names = [f"shard-P{key}-r{r}of{ctx.world_size}" for r in range(ctx.world_size)]
    mine = output / names[ctx.rank]
    part_clips = list(clips)[rank_slice(len(clips), ctx.rank, ctx.world_size)]
    if part_clips and not (mine / ENTRY).is_file():  # not written by an earlier, interrupted run
        shutil.rmtree(mine, ignore_errors=True)  # a shard killed between its rename and its entry
        part, skipped = encode_clips(job.loaded, job.manifest, part_clips, job.langs, job.encode, job.meta)
        entry = storage.write_part(names[ctx.rank], part, job.dtype, job.ann)
        (mine / ENTRY).write_text(json.dumps({"entry": entry, "skipped": skipped}), encoding="utf-8")
        finished_encoding(job.loaded, job.manifest, part_clips, job.encode)
    ctx.barrier()
    done = [json.loads((output / n / ENTRY).read_text(encoding="utf-8")) for n in names
            if (output / n / ENTRY).is_file()]
    added, skipped = sum(d["entry"]["rows"] for d in done), {k: v for d in done for k, v in d["skipped"].items()}
    written = storage.merge_parts([d["entry"] for d in done], job.plan.drop, job.meta, job.loaded.model.embed_dim,
                                  job.dtype) if ctx.is_main else 0
    ctx.barrier()
    if not ctx.is_main:
        return None
    index = Index.load(output, model=job.loaded)
    return BuildReport(index=index, added=added, kept=len(index) - added, skipped=skipped,
                       changed=job.plan.changed, deleted=job.plan.deleted, bytes_written=written)
