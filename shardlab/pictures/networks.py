"""Pictures of how accelerators are wired: a GPU cluster's two levels beside a TPU slice's torus.

Drawing only: the bandwidths printed on the picture are read from the chips' published figures
(``shardlab.layout.ring_bytes``), never typed here.
"""

from __future__ import annotations

from matplotlib.patches import FancyBboxPatch, Rectangle

from shardlab.hardware.chips import CHIPS, GPU_CHIPS
from shardlab.pictures.draw import PALETTE

__all__ = ["draw_gpu_cluster", "draw_torus", "draw_two_networks"]


def _check_count(name, value, low=1, high=64):
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer from {low} to {high}, got {value!r}")


def draw_gpu_cluster(ax, nodes: int = 4, gpus_per_node: int = 8, chip="H100"):
    """Draw ``nodes`` nodes of ``gpus_per_node`` GPUs: NVSwitches inside each node, a network switch above.

    Each GPU has one line to its node's NVSwitches (NVLink) and one to the network switch (its network
    card); the labels give the chip's bandwidths one way per GPU.
    """
    _check_count("nodes", nodes, 1, 8)
    _check_count("gpus_per_node", gpus_per_node, 1, 8)
    chip = GPU_CHIPS[chip] if isinstance(chip, str) else chip
    node_w, gap = 1.0, 0.18
    width = nodes * node_w + (nodes - 1) * gap
    for n in range(nodes):
        x0 = n * (node_w + gap)
        ax.add_patch(FancyBboxPatch((x0, 0), node_w, 1.1, boxstyle="round,pad=0.01,rounding_size=0.04",
                                    facecolor="#f4f4f4", edgecolor="#888", lw=0.8))
        ax.add_patch(Rectangle((x0 + 0.06, 0.2), node_w - 0.12, 0.12, facecolor="#bbb", edgecolor="none"))
        step = (node_w - 0.12) / gpus_per_node
        for g in range(gpus_per_node):
            cx = x0 + 0.06 + step * (g + 0.5)
            ax.plot([cx, cx], [0.32, 0.62], color=PALETTE[0], lw=1.2)           # NVLink to the switches
            ax.plot([cx, width / 2], [0.74, 1.72], color=PALETTE[1], lw=0.5, alpha=0.6)  # network card
            ax.add_patch(Rectangle((cx - step * 0.38, 0.62), step * 0.76, 0.12, facecolor=PALETTE[2],
                                   edgecolor="none"))
        ax.text(x0 + node_w / 2, 0.03, f"node {n}", ha="center", va="bottom", fontsize=9)   # below the bar
    ax.add_patch(Rectangle((width / 2 - 1.0, 1.72), 2.0, 0.2, facecolor=PALETTE[1], edgecolor="none"))
    ax.text(width / 2, 1.82, "network switches", ha="center", va="center", fontsize=9, color="white")
    ax.text(width / 2, 2.02, f"between nodes: {chip.network_bandwidth / 1e9:.0f} GB/s per GPU "
            f"({chip.network_bandwidth * chip.node_size / 1e9:.0f} per node)", ha="center", fontsize=9)
    ax.text(width / 2, -0.12, f"NVSwitches (grey): {chip.link_bandwidth / 1e9:.0f} GB/s per GPU within a node",
            ha="center", va="top", fontsize=9)
    ax.set_xlim(-0.05, width + 0.05)
    ax.set_ylim(-0.35, 2.2)
    ax.set_aspect("auto")
    ax.axis("off")
    ax.set_title(f"{nodes} nodes of {gpus_per_node} {chip.name} GPUs", fontsize=10)


def draw_torus(ax, side: int = 4, chip="TPU v5e"):
    """Draw ``side x side`` chips of a TPU slice, each linked to its neighbours (wraparounds, which only
    a full 16-chip axis of a v5e pod has, are not drawn)."""
    _check_count("side", side, 2, 16)
    chip = CHIPS[chip] if isinstance(chip, str) else chip
    for i in range(side):
        for j in range(side):
            if j + 1 < side:
                ax.plot([j, j + 1], [i, i], color=PALETTE[0], lw=1.2)
            if i + 1 < side:
                ax.plot([j, j], [i, i + 1], color=PALETTE[0], lw=1.2)
            ax.add_patch(Rectangle((j - 0.18, i - 0.18), 0.36, 0.36, facecolor=PALETTE[2], edgecolor="none"))
    ax.text((side - 1) / 2, -0.7, f"{chip.link_bandwidth / 1e9:.0f} GB/s per link, "
            f"{chip.links} links per chip", ha="center", va="top", fontsize=9)
    ax.set_xlim(-0.7, side - 0.3)
    ax.set_ylim(-1.2, side - 0.4)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"{chip.name}: {side} x {side} chips,\nneighbours linked", fontsize=10)


def draw_two_networks(fig, nodes: int = 4, chip="H100", tpu="TPU v5e"):
    """``fig`` with a GPU cluster (left) beside a TPU torus (right)."""
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2.3, 1]})
    draw_gpu_cluster(left, nodes, 8, chip)
    draw_torus(right, 4, tpu)
    return fig
