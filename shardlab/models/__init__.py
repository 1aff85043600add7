"""Models: the book's one time model, turning flops and bytes into modelled time on a TPU slice or GPU cluster.

Everything here is *modelled*, never measured. It may read program reports (``shardlab.programs``)
and uses ``shardlab.hardware``, ``shardlab.layout`` and ``shardlab.arguments``; it draws
nothing (``shardlab.pictures`` sits beside it, and neither imports the other).

* ``shardlab.models.time_model``: links and hops per mesh axis from the topology, a latency per
  collective, and the modelled time of a step or of each pass.
* ``shardlab.models.ring_matmul``: an all-gather matmul as a ring of sends, with and without overlap.
"""
