"""Measured runs, as published, beside the time model's bound for the same configuration.

:data:`MEASURED_RUNS` holds training runs whose configuration is published in full (model shape, chips,
layout, batch, remat policy) with the MFU measured on them and the address of the page that gives it;
:data:`INCOMPLETE_RUNS` the measurements the book quotes whose configuration lacks something the model
needs, and what. :func:`calibration` sets one run's measured MFU against
:func:`shardlab.models.decoder_cost.training_step`'s bound. The measurements are the publishers';
nothing here is measured by this package.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardlab.models.decoder_cost import DecoderShape, torus_network, training_step

__all__ = ["MeasuredRun", "MEASURED_RUNS", "INCOMPLETE_RUNS", "MAXTEXT_SCALES", "calibration"]

_MAXTEXT = "https://github.com/AI-Hypercomputer/maxtext/blob/main/src/maxtext/configs/tpu"
#: Where MaxText's scaled model shapes come from: ``base.yml`` (emb 2,048, 16 heads of 128, MLP 7,168 gated
#: silu x linear, 16 layers, vocabulary 32,000) scaled by ``get_individual_scales`` in ``configs/types.py``.
SCALE_SOURCE = "https://github.com/AI-Hypercomputer/maxtext/blob/main/src/maxtext/configs/types.py"


def _scaled(scale: int) -> DecoderShape:
    """MaxText's ``global_parameter_scale`` model: heads and MLP, embedding, layers doubled in turn."""
    step, rest = divmod(scale.bit_length() - 1, 3)
    heads = step + (rest > 0)
    emb = step + (rest > 1)
    return DecoderShape(d_model=2048 << emb, layers=16 << step, heads=16 << heads, mlp=7168 << heads,
                        vocab=32000, seq=2048, head_dim=128)


#: MaxText's scaled decoders by ``global_parameter_scale`` (:data:`SCALE_SOURCE`).
MAXTEXT_SCALES = {s: _scaled(s) for s in (16, 32, 64, 128, 256, 512, 1024)}


@dataclass(frozen=True, eq=False)     # compared and hashed by identity: a dict field
class MeasuredRun:
    """A published training run: configuration, measured MFU, and where both are published.

    ``spans``: the torus dimensions each layout axis is laid along (:func:`torus_network`), the
    book's assumption where the source names only the axis sizes; ``tokens_per_chip``:
    ``per_device_batch_size x max_target_length``; ``source``: the page with the measurement;
    ``config``: the file with the configuration.
    """

    name: str
    chip: str
    slice: str
    shape: DecoderShape
    tokens_per_chip: int
    fsdp: int
    tp: int
    remat: str
    spans: dict
    measured_mfu: float
    source: str
    config: str

    @property
    def chips(self) -> int:
        return self.fsdp * self.tp


def _v5e(size, batch, remat, fsdp, tp, spans, mfu):
    return MeasuredRun(f"{size}B", "TPU v5e", "v5e-256", MAXTEXT_SCALES[size], batch * 2048, fsdp, tp, remat,
                       spans, mfu, f"{_MAXTEXT}/v5e/README.md", f"{_MAXTEXT}/v5e/{size}b.sh")


def _v5p(size, slice_, batch, remat, tp, fsdp_dims, tp_dim, mfu):
    fsdp = 1
    for d in fsdp_dims:
        fsdp *= d
    return MeasuredRun(f"{size}B", "TPU v5p", slice_, MAXTEXT_SCALES[size], batch * 2048, fsdp, tp, remat,
                       {"fsdp": fsdp_dims, "tp": (tp_dim,)}, mfu, f"{_MAXTEXT}/v5p/README.md",
                       f"{_MAXTEXT}/v5p/{size}b.sh")


#: MaxText's published MFU tables (one slice each; the multi-slice rows cross the data-centre network),
#: with the configurations of the scripts beside them. A v5e-256 is a 16 x 16 pod; v5p slices are named by
#: TensorCores (two per chip): v5p-128 is 4 x 4 x 4 chips, v5p-256 4 x 4 x 8, v5p-512 4 x 8 x 8, v5p-1024
#: 8 x 8 x 8, v5p-2048 8 x 8 x 16, v5p-4096 8 x 16 x 16. The v5e 128B script's ``qkv_proj_offloaded``
#: keeps the q, k, v projections on the host and is modelled as ``save_qkv_proj``.
MEASURED_RUNS = (
    _v5e(16, 6, "full", 256, 1, {"fsdp": (16, 16)}, 0.6110),
    _v5e(32, 4, "full", 256, 1, {"fsdp": (16, 16)}, 0.6686),
    _v5e(64, 2, "full", 256, 1, {"fsdp": (16, 16)}, 0.5990),
    _v5e(128, 1, "save_qkv_proj", 16, 16, {"fsdp": (16,), "tp": (16,)}, 0.5606),
    _v5p(32, "v5p-128", 6, "minimal", 4, (4, 4), 4, 0.7147),
    _v5p(64, "v5p-128", 3, "minimal", 4, (4, 4), 4, 0.7031),
    _v5p(128, "v5p-256", 1, "minimal", 8, (4, 4), 8, 0.6868),
    _v5p(128, "v5p-512", 1, "minimal", 8, (4, 8), 8, 0.6883),
    _v5p(256, "v5p-1024", 1, "minimal", 8, (8, 8), 8, 0.6709),
    _v5p(512, "v5p-1024", 2, "full", 8, (8, 8), 8, 0.6399),
    _v5p(1024, "v5p-2048", 2, "full", 16, (8, 8), 16, 0.5535),
    _v5p(1024, "v5p-4096", 2, "full", 16, (8, 16), 16, 0.6480),
)


#: Measurements quoted by the book whose configuration is incomplete for the model, each as (what,
#: measured, source, what is missing); left out of the calibration.
INCOMPLETE_RUNS = (
    ("900B dense decoder (d_model 16,384, MLP 131,072, 64 query and 16 KV heads of 256, 128 layers), "
     "one v6e-256 pod, TP 16, 4,096 tokens per chip", "39.8% MFU",
     "https://github.com/AI-Hypercomputer/maxtext/blob/main/docs/guides/optimization/custom_model.md",
     "sequence length, remat policy and the FSDP split not published"),
    ("Llama-2-7B served on v5e-8 with 8-way TP, 1,000 requests (218,743 input, 291,740 output tokens), "
     "JetStream's experimental engine", "3,975 output tokens/s",
     "https://github.com/AI-Hypercomputer/JetStream/blob/main/experimental/jax/README.md",
     "batch size and the prefill/decode mix not published"),
)


def calibration(run: MeasuredRun, *, axes_at_once: bool = True) -> dict:
    """``run``'s measured MFU beside the model's bound: ``{"measured", "bound", "serial", "ratio", "ceiling",
    "step", "bound_by"}``.

    ``bound``: :func:`training_step`'s MFU with communication hidden (``serial``: not hidden), each
    with the run's remat recomputation in its time; ``ratio``: measured / bound; ``ceiling``: the MFU the
    remat policy alone leaves (model flops / total flops); ``step``: the modelled overlapped step, s.
    """
    if not isinstance(run, MeasuredRun):
        raise ValueError(f"calibration: run must be a MeasuredRun, got {run!r}")
    t = training_step(run.shape, run.tokens_per_chip, run.chip, torus_network(run.spans), fsdp=run.fsdp,
                      tp=run.tp, remat=run.remat, axes_at_once=axes_at_once)
    return {"measured": run.measured_mfu, "bound": t["mfu"]["overlapped"], "serial": t["mfu"]["serial"],
            "ratio": run.measured_mfu / t["mfu"]["overlapped"], "ceiling": t["flops"]["ceiling"],
            "step": t["overlapped"], "bound_by": t["bound"]}
