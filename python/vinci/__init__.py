"""Read vinci runs from Python: the manifest, the records and pandas DataFrames of them.

    import vinci
    run = vinci.open_run("runs/smoke")
    run.manifest["run_digest"]
    for r in run.records(kind="measurement", phase="eval"): ...
    run.measurements(), run.trials(), run.timings(), run.turns(), run.rollouts(),
    run.selections(), run.verifications(), run.library(), run.skills(), run.metrics(),
    run.fast_p()

Every read is checked (frame checksums, the manifest's record count and run digest, object
addresses); a damaged run raises vinci.DamagedRunError. docs/python.md has the tables' columns.
"""
from ._format import LATEST_FORMAT_VERSION, DamagedRunError, RunError, address_hex, load_schema
from .run import TABLES, Run, open_run, task_level

__version__ = "0.1.0"
__all__ = ["open_run", "Run", "RunError", "DamagedRunError", "TABLES", "LATEST_FORMAT_VERSION",
           "load_schema", "address_hex", "task_level"]
