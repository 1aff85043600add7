"""Pictures: layouts, meshes and links, explorers, network diagrams and timelines, sharp on a phone.

Every figure displays at twice its pixels, no wider than the page's column, with text of at least 9 pt
as displayed and an alt text; explorers redraw in a live kernel and switch precomputed frames on the
published page. Pictures draw what they are given and never compile (import-linter forbids
``shardlab.programs.compile`` here). May use ``shardlab.programs`` (to draw a trace it read),
``shardlab.hardware``, ``shardlab.layout``, ``shardlab.arguments``; never ``shardlab.models``.

* ``shardlab.pictures.display``: figure sizes, PNG encoding, alt text, tables for the page.
* ``shardlab.pictures.style``: the book's figure style (series colours, integer ticks, bar charts).
* ``shardlab.pictures.stacked``: stacked bars of parts that add up; panels of bars sharing labels.
* ``shardlab.pictures.draw``: layouts as heatmaps, meshes, a mesh's physical links.
* ``shardlab.pictures.explore`` and ``shardlab.pictures.static_player``: sliders, live and static.
* ``shardlab.pictures.networks``: a GPU cluster and a TPU torus side by side.
* ``shardlab.pictures.timeline``: one step of a profiler trace, a row per device.
* ``shardlab.pictures.dma_timeline``: a hand-written ring kernel's DMAs, products and semaphores, step by step.
"""
