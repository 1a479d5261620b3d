"""What a run shows and returns: the progress line, trackers, ``samples.jsonl`` and the summary
(:mod:`.reporting`), ``plot.png`` (:mod:`.plot`), ``--profile`` timings (:mod:`.profile`), the result of a
finished run (:mod:`.result`).

Imports: the core only; the explorer, the learner and the modes report through it.
"""
