"""The input pipeline: from a manifest split to training and evaluation batches, at run time.

``mlatr.data`` makes data sets (manifests, importers, the synthetic benchmark, splits); this package reads
them while a model trains or encodes::

    sources.open_source          which Source a run reads (the files or a prepared store; cached or not)
    source.Source                the protocol: load / crop / length of a manifest's clips
      file_source.AudioSource    the manifest's files, decoded when read
      store.StoreSource          a decoded-audio store (``mlatr data prepare``)
    plan.plan_epoch              an epoch's draws, up front, from (seed, epoch): order, caption j, crop
    workers.stream               planned batches read and collated, inline or in worker processes
    batches.TrainBatches         an epoch of TrainBatch (waveforms + caption rows); iter_eval_audio

The randomness contract (every draw of epoch ``e`` from generators seeded by ``(seed, e)``, so a resumed
run is bit-identical and workers change nothing) is stated once, in ``docs/architecture.md`` ("Randomness
and resume").
"""
