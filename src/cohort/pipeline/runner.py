"""Running a pipeline job from parsed options: usage errors as one line (exit 2), a failed Spark
job as one line (exit 1), SIGTERM and SIGINT stopping it cleanly (exit 143 or 130). Used by
cli.py and by each job's spark-submit entry; imports no job."""

from __future__ import annotations

import sys
from collections.abc import Callable

from cohort.pipeline.options import EXIT_FAILED, EXIT_USAGE, UsageError


STOP_WITHIN_S = 3.5  # after SIGTERM or SIGINT, Spark has this long to stop before it is killed
STOPPED = "stopped; tables in --out may be partial"


def _stop_on_signals(prog: str, verbose: bool, out: str | None) -> dict:
    """SIGTERM and SIGINT raise KeyboardInterrupt in the job, whose session then stops (which
    cancels its Spark jobs) and removes its scratch space; a watchdog ends the process if that
    takes too long. (PySpark's own SIGINT handler cancels the jobs over the py4j connection the
    interrupted call is still using, which fails with tracebacks; spark_session keeps this one.)"""
    import logging
    import os
    import signal
    import threading
    import warnings

    caught: dict = {}

    def watchdog(code: int) -> None:
        if caught.get("done"):
            os._exit(code)  # stopped and reported; only the interpreter's exit lingers
        from cohort.pipeline import session

        session.stop_children(1.0)  # Spark took too long: end its JVM, then this process
        if out:
            session.remove_scratch(out)
        print(f"{prog}: {STOPPED}", file=sys.stderr, flush=True)
        os._exit(code)

    def on_signal(signum, frame):
        if caught:
            return  # already stopping
        caught["code"] = 128 + signum
        timer = threading.Timer(STOP_WITHIN_S, watchdog, (caught["code"],))
        timer.daemon = True
        timer.start()
        if not verbose:
            logging.disable(logging.CRITICAL)  # py4j logs the interrupted call's broken connection
            # and the session's stop over that broken connection makes PySpark warn that the JVM
            # "may be in a zombie state" (seen under load in tests/pipeline/test_cli.py); the
            # children are ended either way (session.stop_children)
            warnings.filterwarnings("ignore", message="Unable to cleanly shutdown Spark JVM process",
                                    category=RuntimeWarning)
        raise KeyboardInterrupt

    default_unraisable = sys.unraisablehook

    def unraisable(info) -> None:
        # The KeyboardInterrupt can land where Python ignores exceptions: in logging's at-fork
        # hook while PySpark forks its JVM, say ("Exception ignored in: <function _releaseLock>",
        # seen in tests/pipeline/test_cli.py). The stop still happens, through the watchdog; only
        # the traceback would break the one-line report.
        if caught and isinstance(info.exc_value, KeyboardInterrupt):
            return
        default_unraisable(info)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        sys.unraisablehook = unraisable
    return caught


def run_parsed(args, job: Callable[..., int]) -> int:
    """Run the job chosen on the command line; usage errors become one line and exit 2; SIGTERM
    and SIGINT stop it cleanly (exit 143 or 130)."""
    prog = f"cohort pipeline {args.job}"
    caught = _stop_on_signals(prog, getattr(args, "verbose", False), getattr(args, "out", None))
    try:
        try:
            return job(args)
        except Exception as e:
            # A stop that a library turned into an error of its own; or any failure once a stop
            # signal arrived (its interrupt broke a call that then failed otherwise: seen under
            # load as a SIGINT during the session's start ended with exit 1, not 130).
            if _interrupted(e) or caught.get("code"):
                raise KeyboardInterrupt from e
            raise
    except KeyboardInterrupt:
        from cohort.pipeline import session

        session.stop_children()  # a JVM whose start the signal interrupted
        if getattr(args, "out", None):
            session.remove_scratch(args.out)
        caught["done"] = True
        print(f"{prog}: {STOPPED}", file=sys.stderr)
        return caught.get("code", 130)
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ImportError as e:
        print(f"{prog}: error: {e.name or e} is not installed (pip install 'cohort[pipeline]')", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # a failed Spark job: one line, not a JVM stack trace
        from cohort.pipeline.session import spark_error_line
        from cohort.pipeline.wire import WireError

        line = str(e) if isinstance(e, WireError) else spark_error_line(e)
        if line is None:
            raise
        if getattr(args, "verbose", False):
            import traceback

            traceback.print_exception(e, file=sys.stderr)
        print(f"{prog}: failed: {line}", file=sys.stderr)
        return EXIT_FAILED


def _interrupted(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt (SIGINT or SIGTERM, see _stop_on_signals) is in the chain of
    ``exc``. A SIGINT while PySpark starts its JVM is caught inside PySpark and raised again as
    a start-up error (seen in tests/pipeline/test_cli.py, SIGINT while the session starts): that
    is a stop, not a failed job."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False

