"""Workload families. Importing a family module registers it; the order here is the run order
(and the order of the table and charts)."""

# Imported for their registration side effect, in run order (do not sort).
from . import read  # noqa: F401, I001
from . import metadata  # noqa: F401, I001
from . import write  # noqa: F401, I001
from . import write_metadata  # noqa: F401, I001
from . import manifest  # noqa: F401, I001
from .registry import (FAMILIES, Context, Family, Reference, State, Unit, Workload, all_workloads, family_of,
                       select)

__all__ = ["FAMILIES", "Context", "Family", "Reference", "State", "Unit", "Workload", "all_workloads", "family_of",
           "select"]
