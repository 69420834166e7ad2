"""The `edge-export` command line (also `python -m exporter`).

Heavy modules load inside commands, so `edge-export --help` starts instantly.
Exit codes are those of exporter.errors (0 ok, 2 usage, 3 parity, 4 rejected,
5 integrity, 6 missing prerequisite), 7 for an audit with failing bundles, 8 for an AI Hub job
that outlived its time limit (rerun to resume).
"""

from __future__ import annotations

import os
import sys

# importing a command module registers its commands; this order is the order of `--help`
from exporter.cli import build_cmds  # noqa: F401, I001
from exporter.cli import registry_cmds  # noqa: F401
from exporter.cli import plan_cmds  # noqa: F401
from exporter.cli import audit_cmds  # noqa: F401
from exporter.cli import hub_cmds  # noqa: F401
from exporter.cli.app import app  # noqa: F401 - the entry point's application
from exporter.cli.render import err_console, report_error
from exporter.errors import EdgeExportError


def _on_signal(signum, _frame):
    from exporter.errors import Interrupted

    raise Interrupted(signum)


def main() -> None:
    import signal

    from typer.exceptions import Abort, Exit, TyperException  # typer bundles its own click: its usage errors derive from this

    from exporter.errors import Interrupted, filesystem_error_in

    as_json = "--json" in sys.argv
    # native libraries (QNN, ORT, ninja) print to file descriptor 1; stdout carries only the command's result (the
    # JSON document, a table, a plan), so fd 1 goes to stderr and Python's sys.stdout writes to the original stdout
    real = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(real, "w")
    # SIGTERM (timeout, CI cancellation, docker stop) unwinds like Ctrl-C: staging directories are removed, locks released
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)
    try:
        rc = app(standalone_mode=False)
    except EdgeExportError as e:
        report_error(e, as_json)
        sys.exit(e.exit_code)
    except Interrupted as e:
        name = signal.Signals(e.signum).name
        err_console().print(f"interrupted by {name}: finished stages stay cached and nothing half-written was published; rerun to resume",
                             highlight=False)
        sys.exit(e.exit_code)
    except Exit as e:
        sys.exit(e.exit_code)
    except Abort:
        err_console().print("aborted")
        sys.exit(130)
    except TyperException as e:  # usage: a missing or unknown option, a value of the wrong type
        show = getattr(e, "show", None)
        if show:
            show()
        else:
            err_console().print(f"error: {e}")
        sys.exit(2)
    except Exception as e:  # a full disk, a read-only file system, a file where a directory is needed: say which path
        fs = filesystem_error_in(e)
        if fs is None:
            raise
        report_error(fs, as_json)
        sys.exit(fs.exit_code)
    if rc == 130:  # typer turned a KeyboardInterrupt that reached it into this code
        err_console().print("interrupted: finished stages stay cached; rerun to resume")
    sys.exit(rc if isinstance(rc, int) else 0)
