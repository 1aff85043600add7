"""Layout maths: which tile of an array each device holds, and the bytes a collective sends to change it.

Pure arithmetic on meshes, specs and sizes, fast enough for pods of thousands of devices; it reads a JAX
object it is given but never imports JAX itself. May use only ``shardlab.arguments``.

* ``shardlab.layout.tiles``: a mesh and a PartitionSpec paired: tiles, holders, replication.
* ``shardlab.layout.ring_bytes``: the bytes one device sends in each collective, by the ring model.
"""
