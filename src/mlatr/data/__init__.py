"""Making data sets: manifests, importers, the synthetic benchmark, splits, captions from paths, statistics.

What reads them at run time (audio sources, the epoch plan, worker processes, batches) is the input
pipeline, :mod:`mlatr.data.pipeline`.
"""
