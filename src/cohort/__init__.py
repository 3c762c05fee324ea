"""cohort: a Kafka-compatible broker built around a complete consumer group coordinator."""

import sys as _sys

__version__ = "0.1.0"


def _load_kio_without_hypothesis() -> None:
    """kio (the protocol codec) imports hypothesis whenever it is installed, only to register test
    strategies for its types (kio/static/_phantom.py: ``try: import hypothesis.strategies``). That
    costs every process that speaks the protocol half a second of CPU (hypothesis imports pytest
    and trio; measured 1.1-1.35 s -> 0.6-0.95 s to import the server and the CLI) and makes
    hypothesis write a ``.hypothesis/`` cache where the process runs. Unless hypothesis is loaded
    already (a test run, whose strategies then register as usual), kio's phantom-type base is
    loaded first with hypothesis hidden, so kio takes its own no-hypothesis path."""
    if "hypothesis" in _sys.modules or "kio.static._phantom" in _sys.modules:
        return
    _sys.modules["hypothesis"] = None  # `import hypothesis...` raises ImportError while this is set
    try:
        import kio.static._phantom  # noqa: F401
    except ImportError:
        pass  # kio missing: its importers report it
    finally:
        del _sys.modules["hypothesis"]


_load_kio_without_hypothesis()
