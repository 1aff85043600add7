"""The hardware: chips and their published figures, TPU slices and GPU clusters, memories, compilers.

What a chapter compiles for and the figures its models start from, each with its source. Uses
:mod:`shardlab.layout` and :mod:`shardlab.arguments`; reads no program.

* :mod:`~shardlab.hardware.chips`: TPU and GPU chips' published figures; device kind to chip.
* :mod:`~shardlab.hardware.tpus`: TPU slices compiled for ahead of time with libtpu, with no TPU here.
* :mod:`~shardlab.hardware.gpus`: GPU clusters compiled for with JAX's CUDA plugin, with no GPU here.
* :mod:`~shardlab.hardware.targets`: any target by name (``"here"``, a TPU slice, a GPU cluster), its
  devices and its mesh.
* :mod:`~shardlab.hardware.memory_kinds`: which memories (``device``, ``pinned_host``, ...) a device has.
* :mod:`~shardlab.hardware.environment`: libtpu and the CUDA plugin on a machine with neither chip.
* :mod:`~shardlab.hardware.registry`: the one lookup of a chip or a target by name.
"""
