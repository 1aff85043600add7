"""A chapter run the way a Colab or Kaggle user runs it: the .ipynb alone, in an environment that has
only JAX and Jupyter, where the first cell must install the helper package itself (and where no libtpu
is installed, so its TPU cells must each print one line and let the chapter go on)."""

import os
import shutil
import subprocess
import sys
import venv

import nbformat

from tests.paths import IPYTHONDIR, NOTEBOOKS, ROOT

CHAPTER = NOTEBOOKS / "01_devices_and_meshes.ipynb"

EXECUTE = """
import sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, timeout=300, kernel_name="python3").execute()
nbformat.write(nb, sys.argv[1])
"""


def sh(*cmd, **kw):
    return subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True, timeout=600, **kw)


def test_chapter_installs_what_it_needs_in_a_bare_environment(tmp_path):
    # The repository, as Colab would fetch it, stands here as a wheel built from this checkout.
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path / "wheel", ROOT)
    (wheel,) = (tmp_path / "wheel").glob("shardlab-*.whl")

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    sh(python, "-m", "pip", "install", "-q", "jax", "ipykernel", "nbclient")
    missing = subprocess.run([python, "-c", "import shardlab"], capture_output=True, cwd=tmp_path)
    assert missing.returncode != 0, "the bare environment must not have shardlab yet"

    work = tmp_path / "colab"
    work.mkdir()
    shutil.copy2(CHAPTER, work)
    env = {"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "IPYTHONDIR": str(IPYTHONDIR),
           "SHARDLAB_SOURCE": str(wheel), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    sh(python, "-c", EXECUTE, work / CHAPTER.name, cwd=work, env=env)

    nb = nbformat.read(work / CHAPTER.name, as_version=4)
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c["execution_count"] for c in code), "every cell ran"
    assert "simulated CPU devices" in "".join(o.get("text", "") for o in code[0]["outputs"])
    sh(python, "-c", "import shardlab", cwd=tmp_path)  # the first cell installed it

    # Plain `pip install jax` brings no libtpu: every cell that compiles for a TPU says so in one line.
    tpu_cells = [c for c in code if "compiling_for_tpu()" in c["source"]]
    assert tpu_cells, f"{CHAPTER.name} has no TPU cell to check"
    for c in tpu_cells:
        text = "".join(o.get("text", "") for o in c["outputs"])
        assert text.count("\n") == 1 and text.startswith("No TPU compiler here"), (c["source"], text)
