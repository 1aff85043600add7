"""shardlab: the helper package of the book 'Parallelism in JAX'.

Its subpackages follow the book's layers, bottom to top; a module imports only from its own layer and
the layers below it (``make test`` checks this with import-linter, ``.importlinter``):

* :mod:`shardlab.arguments`: the argument checks every layer uses.
* :mod:`shardlab.layout`: pure maths: which tile of an array each device holds, and the bytes a ring
  collective sends per device. No JAX needed.
* :mod:`shardlab.hardware`: chips and their published figures, TPU slices and GPU clusters compiled for
  with no such chip here, the memories a device has, and the compilers' environment.
* :mod:`shardlab.programs`: what XLA wrote: one HLO reader, and on it the collectives, schedules, loops
  and memory placements of a program; compiling for a target; profiler traces. It knows no model.
* :mod:`shardlab.models` and :mod:`shardlab.pictures`, side by side: the one time model (links and hops
  from the topology, a latency per collective), and the pictures (layouts, meshes, explorers that work
  live and on the published page, timelines). Neither uses the other; pictures never compile.
* :mod:`shardlab.parallelism`: the recipes of Parts II and III: collectives step by step, training
  strategies, the backward pass, pipelines, ring attention, experts, a transformer at scale, serving.
* :mod:`shardlab.setup`: what a chapter calls first (its devices) and last (checking a reader's answer),
  and several local processes; it may use every layer.

The chapters use the names below, imported from here.
"""

# First: it imports JAX with libtpu's start-up noise hidden.
from shardlab.setup.devices import setup_devices  # noqa: I001

from shardlab.setup.exercises import check
from shardlab.setup.processes import ProcessesFailed, ProcessesTimedOut, ProcessResult, free_port, run_processes
from shardlab.setup.process_ends import ProcessEnd, watch_processes
from shardlab.layout.ring_bytes import (bytes_all_gather, bytes_all_reduce, bytes_all_to_all, bytes_all_to_all_ring,
                                        bytes_permute, bytes_reduce_scatter)
from shardlab.layout.tiles import Layout, layout_of, tile_map
from shardlab.hardware.chips import CHIPS, GPU_CHIPS, Chip, GpuChip
from shardlab.hardware.gpus import (GPU_TARGETS, GPUCompilerUnavailable, GpuTarget, compiling_for_gpu,
                                    gpu_compiler_missing)
from shardlab.hardware.links import hops, physical_links
from shardlab.hardware.memory_kinds import has_memory_kind, memory_kinds, missing_memory_kind
from shardlab.hardware.targets import HERE, target_devices, target_mesh
from shardlab.hardware.tpus import TARGETS, Target, TPUCompilerUnavailable, compiling_for_tpu, tpu_compiler_missing
from shardlab.hardware.dcn import DCN, DCN_STEP_LATENCY, DcnLink, dcn_link
from shardlab.hardware.slices import hybrid_mesh, slice_devices
from shardlab.programs.collectives import (Collective, CollectiveReport, collectives_in, collectives_in_compiled,
                                           collectives_in_text)
from shardlab.programs.compile import CompiledProgram, MemoryKindWarning, ProgramMemory, compile_for
from shardlab.programs.loops import LoopedCollective, StepCollectives, collectives_per_step
from shardlab.programs.placements import memory_placements
from shardlab.programs.slices import DcnTransfer, dcn_transfers, split_by_slice
from shardlab.programs.schedule import (AsyncWindow, ScheduledOp, async_windows, loop_bodies, scheduled_order,
                                        windowed_loops)
from shardlab.programs.traces import (DeviceOp, InstructionSource, MemorySample, Trace, Wait, hlo_sources, op_kind,
                                      op_totals, read_memory_profile, read_trace, scope_of, time_breakdown, trace_file)
from shardlab.models.ring_matmul import ring_matmul_time
from shardlab.models.network import (ICI_HOP_LATENCY, AxisNetwork, Traffic, axis_links, axis_network, compiled_traffic,
                                     gpu_group_network, group_network, mesh_network, shared_links, step_traffic,
                                     torus_wraparound)
from shardlab.models.network import dcn_network, dcn_traffic, multislice_traffic, slice_mesh
from shardlab.models.time_model import modelled_passes, modelled_time, step_time
from shardlab.models.decoder_cost import (DecoderShape, decoder_params, fsdp_tp_critical_batch, layout_traffic,
                                          optimal_fsdp, torus_network, training_flops, training_step)
from shardlab.models.published_runs import INCOMPLETE_RUNS, MEASURED_RUNS, MeasuredRun, calibration
from shardlab.pictures.display import markdown_table
from shardlab.pictures.dma_timeline import draw_dma_timeline
from shardlab.pictures.draw import PALETTE, ShardFigure, device_color, draw_links, draw_mesh, draw_sharding
from shardlab.pictures.explore import Explorer, explorer, sharding_explorer
from shardlab.pictures.style import SERIES, bar_chart, integer_ticks, tidy_axes
from shardlab.pictures.stacked import bar_panels, stacked_bar_chart
from shardlab.pictures.timeline import draw_timeline
from shardlab.parallelism.attention import (block_kinds, causal_work, kv_block_at, longest_sequence,
                                            ring_attention_comm, ring_attention_memory, token_positions)
from shardlab.parallelism.backward import (Transpose, TransposeTable, split_microbatches, transpose_table,
                                           transposed_collectives)
from shardlab.parallelism.collective_steps import (CollectiveRun, RingSteps, collective_view, draw_collective,
                                                   ring_steps, run_collective)
from shardlab.parallelism.experts import (Routing, dispatch_and_combine, expert_capacity, expert_load,
                                          load_balancing_loss, router_logits, router_z_loss, top_k_routing)
from shardlab.parallelism.logical_axes import logical_spec
from shardlab.parallelism.pallas_collectives import (Race, RaceReport, RingEvent, bidirectional_all_gather,
                                                   catch_races, collective_matmul, interpret_mode, ring_all_gather,
                                                   ring_events, ring_reduce_scatter)
from shardlab.parallelism.mpmd import MpmdRun, mpmd_pipeline
from shardlab.parallelism.pipeline import (Schedule, bubble_fraction, bubble_model, circular_schedule, draw_schedule,
                                           gpipe_schedule, in_flight, one_f_one_b_schedule, zero_bubble_schedule)
from shardlab.parallelism.serving import (LLAMA_8B_LIKE, DecoderConfig, cache_shapes, cache_specs, decoder_shapes,
                                          decoder_specs, empty_cache, forward_with_cache, forward_without_cache,
                                          generate, init_decoder, serving_bytes, serving_flops, serving_time,
                                          sharded_step, step_arguments)
from shardlab.parallelism.strategies import (STRATEGIES, MLPSizes, Transfer, compute_bound_from, mlp_bytes,
                                             mlp_memory, mlp_pass_flops, mlp_transfers, phase_of, step_times)
from shardlab.parallelism.transformer import (TransformerConfig, mesh_factorisations, model_flops,
                                              model_flops_utilisation, param_shapes, param_specs, reversal_batch,
                                              stack_blocks, without_fsdp)

__all__ = [
    # set-up and exercises
    "setup_devices", "check", "markdown_table",
    # layouts and their pictures
    "Layout", "tile_map", "layout_of", "PALETTE", "device_color", "draw_sharding", "draw_mesh", "ShardFigure",
    "draw_links", "physical_links", "hops",
    # explorers
    "Explorer", "explorer", "sharding_explorer",
    # the book's figure style: series colours, integer ticks, tidy axes, bar charts instead of tables
    "SERIES", "bar_chart", "integer_ticks", "tidy_axes",
    # parts that add up as stacked bars; bar charts one above the other, sharing their labels
    "stacked_bar_chart", "bar_panels",
    # compiled code
    "collectives_in", "collectives_in_compiled", "collectives_in_text", "Collective", "CollectiveReport",
    # the cost model: ring-model bytes, published chip figures, modelled time
    "bytes_all_gather", "bytes_reduce_scatter", "bytes_all_reduce", "bytes_all_to_all", "bytes_all_to_all_ring",
    "bytes_permute", "Chip", "CHIPS", "step_time",
    # the one time model: links and hops per mesh axis from the topology, latency, modelled time
    "ICI_HOP_LATENCY", "AxisNetwork", "Traffic", "torus_wraparound", "group_network", "axis_network", "axis_links",
    "shared_links", "mesh_network", "compiled_traffic", "modelled_time", "modelled_passes",
    # a decoder's training step on paper, and the published runs it is set against
    "DecoderShape", "decoder_params", "training_flops", "layout_traffic", "torus_network", "training_step",
    "fsdp_tp_critical_batch", "optimal_fsdp", "MeasuredRun", "MEASURED_RUNS", "INCOMPLETE_RUNS", "calibration",
    # compile targets: here, or a TPU slice compiled for ahead of time
    "Target", "TARGETS", "HERE", "target_devices", "target_mesh", "compile_for", "CompiledProgram",
    "ProgramMemory", "MemoryKindWarning", "compiling_for_tpu", "tpu_compiler_missing", "TPUCompilerUnavailable",
    # GPU targets: NVIDIA nodes and clusters compiled for with no GPU, their chips, their two-level network
    "GpuTarget", "GPU_TARGETS", "compiling_for_gpu", "gpu_compiler_missing", "GPUCompilerUnavailable",
    "GpuChip", "GPU_CHIPS", "gpu_group_network", "step_traffic",
    # collectives step by step
    "run_collective", "ring_steps", "collective_view", "draw_collective", "CollectiveRun", "RingSteps",
    # memory kinds
    "has_memory_kind", "memory_kinds", "memory_placements", "missing_memory_kind",
    # several processes
    "run_processes", "free_port", "ProcessResult", "ProcessesFailed", "ProcessesTimedOut",
    "watch_processes", "ProcessEnd",
    # training strategies
    "STRATEGIES", "MLPSizes", "Transfer", "mlp_transfers", "mlp_bytes", "mlp_memory", "phase_of",
    "mlp_pass_flops", "step_times", "compute_bound_from",
    # hiding communication behind compute: the schedule read, the ring matmul modelled
    "scheduled_order", "async_windows", "ScheduledOp", "AsyncWindow", "ring_matmul_time", "loop_bodies",
    "windowed_loops",
    # pipeline schedules: which microbatch each stage works on, the bubble, the picture
    "Schedule", "gpipe_schedule", "one_f_one_b_schedule", "circular_schedule", "bubble_fraction", "bubble_model",
    "in_flight", "draw_schedule", "zero_bubble_schedule",
    # the backward pass: forward collective -> backward collective, collectives per step with loops
    "transposed_collectives", "transpose_table", "Transpose", "TransposeTable", "collectives_per_step",
    "StepCollectives", "LoopedCollective", "split_microbatches",
    # experts: top-k routing with a capacity per expert, the dispatch and combine tensors, the load
    "expert_capacity", "top_k_routing", "Routing", "dispatch_and_combine", "expert_load",
    "router_logits", "load_balancing_loss", "router_z_loss",
    # sequence parallelism: ring attention's blocks, causal work, memory and sends modelled
    "kv_block_at", "token_positions", "causal_work", "block_kinds", "ring_attention_memory",
    "ring_attention_comm", "longest_sequence",
    # a transformer trained at scale: its sizes, specs per layout, task, flops and MFU
    "TransformerConfig", "param_specs", "param_shapes", "without_fsdp", "reversal_batch", "model_flops",
    "model_flops_utilisation", "mesh_factorisations", "stack_blocks", "logical_spec",
    # where the time goes: a profiler trace per device, the program's sources, the memory profile
    "read_trace", "trace_file", "Trace", "DeviceOp", "Wait", "op_kind", "time_breakdown", "op_totals",
    "draw_timeline", "hlo_sources", "InstructionSource", "scope_of", "read_memory_profile", "MemorySample",
    # serving a model: a decoder with a KV cache, its sharded step, the bytes and time of a step modelled
    "DecoderConfig", "LLAMA_8B_LIKE", "init_decoder", "decoder_shapes", "decoder_specs", "cache_specs",
    "cache_shapes", "empty_cache", "forward_with_cache", "forward_without_cache", "generate", "sharded_step",
    "step_arguments", "serving_bytes", "serving_flops", "serving_time",
    # collectives written by hand in Pallas: ring kernels, interpret mode and its race detector, the DMA timeline
    "ring_all_gather", "bidirectional_all_gather", "ring_reduce_scatter", "collective_matmul", "interpret_mode",
    "catch_races", "Race", "RaceReport", "RingEvent", "ring_events", "draw_dma_timeline",
    # several slices and several programs: the DCN, the hybrid mesh, transfers across slices, MPMD
    "DCN", "DCN_STEP_LATENCY", "DcnLink", "dcn_link", "slice_devices", "hybrid_mesh", "DcnTransfer", "dcn_transfers",
    "split_by_slice", "dcn_network", "dcn_traffic", "slice_mesh", "multislice_traffic", "MpmdRun",
    "mpmd_pipeline",
]
__version__ = "0.1.0"
