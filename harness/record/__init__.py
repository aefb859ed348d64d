"""Records and what is computed from them, with no I/O beyond the journal file.

- `records`: `Record` and `ErrorKind`, the contract between measuring and viewing;
- `journal`: JSON Lines written while the run goes, read back as columns;
- `hist`: HDR histograms (mergeable across processes and machines);
- `metrics`: the metric computations (names, labels and directions: `harness.catalogue`; a new
  metric is a catalogue row plus its computation here).

record imports nothing of config, workload, client or the server side.
"""
