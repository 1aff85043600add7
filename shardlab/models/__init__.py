"""Models: the book's one time model, turning flops and bytes into modelled time on a TPU slice or GPU cluster.

Everything here is *modelled*, never measured. It may read program reports (``shardlab.programs``)
and uses ``shardlab.hardware``, ``shardlab.layout`` and ``shardlab.arguments``; it draws
nothing (``shardlab.pictures`` sits beside it, and neither imports the other).

* ``shardlab.models.network``: links and hops per mesh axis, from the TPU topology or the GPU
  cluster; a program's collectives as traffic over them.
* ``shardlab.models.time_model``: a step's flops and traffic turned into modelled time, per step or pass.
* ``shardlab.models.decoder_cost``: a decoder's training step on paper (flops, remat, FSDP x TP x DP
  traffic, HBM bytes) and its MFU bound.
* ``shardlab.models.published_runs``: measured runs with their sources, set against that bound.
* ``shardlab.models.ring_matmul``: an all-gather matmul as a ring of sends, with and without overlap.
"""
