# Loaded by every kernel the tests start (IPYTHONDIR points here): a deprecation
# warning raised by chapter code, by JAX or by shardlab fails the cell.
import warnings

for _module in (r"__main__", r"jax(\..*)?", r"jaxlib(\..*)?", r"shardlab(\..*)?"):
    warnings.filterwarnings("error", category=DeprecationWarning, module=_module)
    warnings.filterwarnings("error", category=FutureWarning, module=_module)
del _module
