"""Audio I/O (load, mono, resample, crop/pad) and the log-mel front end."""
