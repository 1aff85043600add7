"""Pictures: layouts, meshes and links, explorers, network diagrams and timelines, sharp on a phone.

Every figure displays at twice its pixels, no wider than the page's column, with text of at least 9 pt
as displayed and an alt text; explorers redraw in a live kernel and switch precomputed frames on the
published page. Pictures draw what they are given and never compile (import-linter forbids
:mod:`shardlab.programs.compile` here). Uses :mod:`shardlab.programs` (to draw a trace it read),
:mod:`shardlab.hardware`, :mod:`shardlab.layout`, :mod:`shardlab.arguments`; never :mod:`shardlab.models`.

* :mod:`~shardlab.pictures.display`: figure sizes, PNG encoding, alt text, tables for the page.
* :mod:`~shardlab.pictures.draw`: layouts as heatmaps, meshes, a mesh's physical links.
* :mod:`~shardlab.pictures.explore` and :mod:`~shardlab.pictures.static_player`: sliders, live and static.
* :mod:`~shardlab.pictures.networks`: a GPU cluster and a TPU torus side by side.
* :mod:`~shardlab.pictures.timeline`: one step of a profiler trace, a row per device.
"""
