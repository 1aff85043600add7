"""Parallelism: the recipes of Parts II and III, built on every layer below.

Each module is one chapter's machinery: run, compiled, modelled or drawn with the layers below it.

* ``shardlab.parallelism.collective_steps``: one collective run, every device's buffer step by step.
* ``shardlab.parallelism.strategies``: data, FSDP and tensor parallel MLP steps, modelled.
* ``shardlab.parallelism.backward``: which collective each forward collective becomes; microbatches.
* ``shardlab.parallelism.pipeline``: GPipe, 1F1B, circular and zero-bubble schedules.
* ``shardlab.parallelism.mpmd``: a pipeline of separate programs, one per stage, driven from Python.
* ``shardlab.parallelism.attention``: ring attention's blocks, causal work, memory and sends.
* ``shardlab.parallelism.experts``: top-k routing with a capacity, dispatch and combine.
* ``shardlab.parallelism.logical_axes`` and ``shardlab.parallelism.transformer``: a transformer
  with logical axis names mapped to a mesh by one table of rules.
* ``shardlab.parallelism.training_step``: the transformer's training step compiled and counted.
* ``shardlab.parallelism.serving``: a decoder with a KV cache, its sharded step, its time modelled.
* ``shardlab.parallelism.pallas_collectives``: ring collectives and a collective matmul written as
  Pallas TPU kernels (remote DMAs, semaphores), run in TPU interpret mode; its race detector.
"""
