"""The hardware: chips and their published figures, TPU slices and GPU clusters, memories, compilers.

What a chapter compiles for and the figures its models start from, each with its source. May use
``shardlab.layout`` and ``shardlab.arguments``; reads no program.

* ``shardlab.hardware.chips``: TPU and GPU chips' published figures; device kind to chip.
* ``shardlab.hardware.tpus``: TPU slices compiled for ahead of time with libtpu, with no TPU here.
* ``shardlab.hardware.gpus``: GPU clusters compiled for with JAX's CUDA plugin, with no GPU here.
* ``shardlab.hardware.targets``: any target by name (``"here"``, a TPU slice, a GPU cluster), its
  devices and its mesh.
* ``shardlab.hardware.links``: where a TPU device's chip sits, and how many direct links apart two are.
* ``shardlab.hardware.dcn``: the data-centre network between slices, per chip, with its sources.
* ``shardlab.hardware.slices``: several TPU slices as one job: their devices and the hybrid mesh.
* ``shardlab.hardware.memory_kinds``: which memories (``device``, ``pinned_host``, ...) a device has.
* ``shardlab.hardware.environment``: libtpu and the CUDA plugin on a machine with neither chip.
* ``shardlab.hardware.registry``: the one lookup of a chip or a target by name.
"""
