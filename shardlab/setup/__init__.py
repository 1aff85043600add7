"""Set-up: what a chapter calls first (its devices) and last (checking a reader's answer); local processes.

The top layer: :func:`~shardlab.setup_devices` starts JAX with the chapter's devices, quiets the
compilers and sets the figure defaults, so it may use every layer below.

* ``shardlab.setup.devices``: the chapter's devices, real or simulated.
* ``shardlab.setup.exercises``: checking a reader's answer, with a hint.
* ``shardlab.setup.processes``: a script run as several local processes that form one JAX program.
* ``shardlab.setup.process_ends``: the same processes watched until each ends, for showing failures.
"""
