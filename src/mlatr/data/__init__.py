"""Manifests, importers, datasets, pairing schemes and the synthetic benchmark."""
