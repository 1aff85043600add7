"""shardlab: the helper package of the book 'Parallelism in JAX'.

Device set-up, sharding layouts and their pictures, explorers that work live
and on the published page, and the collectives read from compiled code.
"""

from shardlab.devices import setup_devices
from shardlab.exercises import check
from shardlab.memory import has_memory_kind, memory_kinds, memory_placements, missing_memory_kind

__all__ = ["setup_devices", "check"]
__all__ += ["has_memory_kind", "memory_kinds", "memory_placements", "missing_memory_kind"]
from shardlab.processes import ProcessesFailed, ProcessesTimedOut, ProcessResult, free_port, run_processes
__all__ += ["run_processes", "free_port", "ProcessResult", "ProcessesFailed", "ProcessesTimedOut"]
__version__ = "0.1.0"
from shardlab.layout import Layout, layout_of, tile_map
from shardlab.draw import PALETTE, device_color, draw_mesh, draw_sharding
from shardlab.explore import Explorer, explorer, sharding_explorer
__all__ += ["Layout", "tile_map", "layout_of", "PALETTE", "device_color", "draw_sharding", "draw_mesh",
            "Explorer", "explorer", "sharding_explorer"]
