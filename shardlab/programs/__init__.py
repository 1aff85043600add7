"""Programs: what XLA wrote, read. Compiling for a target, and reading the program and its profile.

Everything here is read from a compiled program or a trace, never modelled: the bytes a collective
sends per device come from :mod:`shardlab.layout.ring_bytes` (layout maths), and no module here
imports a model. Uses :mod:`shardlab.hardware`, :mod:`shardlab.layout` and :mod:`shardlab.arguments`.

* :mod:`~shardlab.programs.hlo`: the one HLO text parser every reader below uses.
* :mod:`~shardlab.programs.collectives`: the collectives jit inserted: kind, shapes, groups, bytes.
* :mod:`~shardlab.programs.loops`: collectives counted once per trip of their ``while`` loops.
* :mod:`~shardlab.programs.schedule`: the scheduled order and the asynchronous windows.
* :mod:`~shardlab.programs.placements`: which buffers a program keeps in which memory.
* :mod:`~shardlab.programs.compile`: :func:`~shardlab.compile_for`, and what the program reports.
* :mod:`~shardlab.programs.traces`: a profiler trace read per device; an op traced back to its source.
"""
