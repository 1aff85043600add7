"""After a test run: hand the chapters executed by the tests to the book's execution cache.

The cache matches notebooks by the hash of their code, so a stale execution is never reused.
"""

from tests.paths import CACHE, CHAPTERS, EXECUTED, HAND_TO_BOOK


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput") or not HAND_TO_BOOK or not EXECUTED.is_dir():
        return  # only the controlling process, once every worker is done
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache = get_cache(str(CACHE))
    sources = {md.stem: md for md in CHAPTERS}
    for executed in sorted(EXECUTED.glob("*.ipynb")):
        md = sources.get(executed.stem)
        if md is None:
            continue
        nb = nbformat.read(executed, as_version=4)
        cache.cache_notebook_bundle(CacheBundleIn(nb, str(md)), check_validity=False, overwrite=True)
