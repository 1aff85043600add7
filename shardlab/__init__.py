"""shardlab: the helper package of the book 'Parallelism in JAX'.

Device set-up, sharding layouts and their pictures, explorers that work live
and on the published page, the collectives read from compiled code and the
ring model of what they send, one time model (links from the topology, a
latency per collective), and the small machinery some chapters need
(memory kinds, local processes, the communication model of training strategies,
transposed collectives, pipeline schedules, compiled schedules and overlap, ring
attention, expert routing, a small transformer).
"""

from shardlab.devices import setup_devices
from shardlab.display import markdown_table
from shardlab.exercises import check
from shardlab.layout import Layout, layout_of, tile_map
from shardlab.draw import PALETTE, ShardFigure, device_color, draw_links, draw_mesh, draw_sharding, hops, physical_links
from shardlab.explore import Explorer, explorer, sharding_explorer
from shardlab.compiled import Collective, CollectiveReport, collectives_in, collectives_in_compiled, collectives_in_text
from shardlab.cost_model import (CHIPS, Chip, bytes_all_gather, bytes_all_reduce, bytes_all_to_all,
                                 bytes_all_to_all_ring, bytes_permute, bytes_reduce_scatter, step_time)
from shardlab.time_model import (ICI_HOP_LATENCY, AxisNetwork, Traffic, axis_links, axis_network, compiled_traffic,
                                 group_network, mesh_network, modelled_passes, modelled_time, shared_links,
                                 torus_wraparound)
from shardlab.targets import (HERE, TARGETS, CompiledProgram, ProgramMemory, Target, TPUCompilerUnavailable,
                              compile_for, compiling_for_tpu, target_devices, target_mesh, tpu_compiler_missing)
from shardlab.gpu_targets import (GPU_TARGETS, GPUCompilerUnavailable, GpuTarget, compiling_for_gpu,
                                  gpu_compiler_missing)
from shardlab.cost_model import GPU_CHIPS, GpuChip
from shardlab.time_model import gpu_group_network, step_traffic
from shardlab.collectives import (CollectiveRun, RingSteps, collective_view, draw_collective, ring_steps,
                                  run_collective)
from shardlab.memory import has_memory_kind, memory_kinds, memory_placements, missing_memory_kind
from shardlab.processes import ProcessesFailed, ProcessesTimedOut, ProcessResult, free_port, run_processes
from shardlab.strategies import (STRATEGIES, MLPSizes, Transfer, compute_bound_from, mlp_bytes, mlp_memory,
                                 mlp_pass_flops, mlp_transfers, phase_of, step_times)
from shardlab.overlap import (AsyncWindow, ScheduledOp, async_windows, loop_bodies, ring_matmul_time,
                              scheduled_order, windowed_loops)
from shardlab.pipeline import (Schedule, bubble_fraction, bubble_model, circular_schedule, draw_schedule,
                               gpipe_schedule, in_flight, one_f_one_b_schedule, zero_bubble_schedule)
from shardlab.backward import (LoopedCollective, StepCollectives, Transpose, TransposeTable, collectives_per_step,
                               split_microbatches, transpose_table, transposed_collectives)
from shardlab.experts import (Routing, dispatch_and_combine, expert_capacity, expert_load,
                               load_balancing_loss, router_logits, router_z_loss, top_k_routing)
from shardlab.attention import (block_kinds, causal_work, kv_block_at, longest_sequence, ring_attention_comm,
                                ring_attention_memory, token_positions)
from shardlab.transformer import (TransformerConfig, mesh_factorisations, model_flops, model_flops_utilisation,
                                  param_shapes, param_specs, reversal_batch, stack_blocks, without_fsdp)
from shardlab.logical_axes import logical_spec
from shardlab.profiling import (DeviceOp, InstructionSource, MemorySample, Trace, Wait, draw_timeline, hlo_sources,
                                op_kind, op_totals, read_memory_profile, read_trace, scope_of, time_breakdown,
                                trace_file)
from shardlab.serving import (LLAMA_8B_LIKE, DecoderConfig, cache_shapes, cache_specs, decoder_shapes, decoder_specs,
                              empty_cache, forward_with_cache, forward_without_cache, generate, init_decoder,
                              serving_bytes, serving_flops, serving_time, sharded_step, step_arguments)

__all__ = [
    # set-up and exercises
    "setup_devices", "check", "markdown_table",
    # layouts and their pictures
    "Layout", "tile_map", "layout_of", "PALETTE", "device_color", "draw_sharding", "draw_mesh", "ShardFigure",
    "draw_links", "physical_links", "hops",
    # explorers
    "Explorer", "explorer", "sharding_explorer",
    # compiled code
    "collectives_in", "collectives_in_compiled", "collectives_in_text", "Collective", "CollectiveReport",
    # the cost model: ring-model bytes, published chip figures, modelled time
    "bytes_all_gather", "bytes_reduce_scatter", "bytes_all_reduce", "bytes_all_to_all", "bytes_all_to_all_ring",
    "bytes_permute", "Chip", "CHIPS", "step_time",
    # the one time model: links and hops per mesh axis from the topology, latency, modelled time
    "ICI_HOP_LATENCY", "AxisNetwork", "Traffic", "torus_wraparound", "group_network", "axis_network", "axis_links",
    "shared_links", "mesh_network", "compiled_traffic", "modelled_time", "modelled_passes",
    # compile targets: here, or a TPU slice compiled for ahead of time
    "Target", "TARGETS", "HERE", "target_devices", "target_mesh", "compile_for", "CompiledProgram",
    "ProgramMemory", "compiling_for_tpu", "tpu_compiler_missing", "TPUCompilerUnavailable",
    # GPU targets: NVIDIA nodes and clusters compiled for with no GPU, their chips, their two-level network
    "GpuTarget", "GPU_TARGETS", "compiling_for_gpu", "gpu_compiler_missing", "GPUCompilerUnavailable",
    "GpuChip", "GPU_CHIPS", "gpu_group_network", "step_traffic",
    # collectives step by step
    "run_collective", "ring_steps", "collective_view", "draw_collective", "CollectiveRun", "RingSteps",
    # memory kinds
    "has_memory_kind", "memory_kinds", "memory_placements", "missing_memory_kind",
    # several processes
    "run_processes", "free_port", "ProcessResult", "ProcessesFailed", "ProcessesTimedOut",
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
]
__version__ = "0.1.0"
