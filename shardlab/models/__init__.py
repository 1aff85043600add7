"""Models: the book's one time model, turning flops and bytes into modelled time on a TPU slice or GPU cluster.

Everything here is *modelled*, never measured. It may read program reports (:mod:`shardlab.programs`)
and uses :mod:`shardlab.hardware`, :mod:`shardlab.layout` and :mod:`shardlab.arguments`; it draws
nothing (:mod:`shardlab.pictures` sits beside it, and neither imports the other).

* :mod:`~shardlab.models.time_model`: links and hops per mesh axis from the topology, a latency per
  collective, and the modelled time of a step or of each pass.
* :mod:`~shardlab.models.ring_matmul`: an all-gather matmul as a ring of sends, with and without overlap.
"""
