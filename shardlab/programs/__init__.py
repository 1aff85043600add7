"""Programs: what XLA wrote, read. Compiling for a target, and reading the program and its profile.

Everything here is read from a compiled program or a trace, never modelled: the bytes a collective
sends per device come from ``shardlab.layout.ring_bytes`` (layout maths), and no module here
imports a model. May use ``shardlab.hardware``, ``shardlab.layout`` and ``shardlab.arguments``.

* ``shardlab.programs.hlo``: the one HLO text parser every reader below uses.
* ``shardlab.programs.collectives``: the collectives jit inserted: kind, shapes, groups, bytes.
* ``shardlab.programs.loops``: collectives counted once per trip of their ``while`` loops.
* ``shardlab.programs.schedule``: the scheduled order and the asynchronous windows.
* ``shardlab.programs.placements``: which buffers a program keeps in which memory.
* ``shardlab.programs.compile``: :func:`~shardlab.compile_for`, and what the program reports.
* ``shardlab.programs.slices``: collectives inside a slice, and the transfers across slices.
* ``shardlab.programs.traces``: a profiler trace read per device; an op traced back to its source.
"""
