"""Validation: the models against published measurements.

- :mod:`~commodel.validate.measurements`: the measurements (``data/measurements.csv``), read once;
- :mod:`~commodel.validate.runs`: the run settings behind them, as data (``data/runs.toml``);
- :mod:`~commodel.validate.descriptions`: the one reader of a row's own description of its run;
- :mod:`~commodel.validate.adapters`: one adapter per kind of measurement, pricing a row by the same
  library functions the CLI uses (:mod:`~commodel.validate.training` for the training runs);
- :mod:`~commodel.validate.gates`: accuracy gates, pending rows and known gaps, as data
  (``data/gates.toml``);
- :mod:`~commodel.validate.table`: the validation table and where the models stand;
- :mod:`~commodel.validate.bands`: uncertainty bands built from the table's errors.
"""

from commodel.validate.gates import accuracy_gates, summary
from commodel.validate.measurements import load_measurements
from commodel.validate.table import standing, validation_table

__all__ = ["accuracy_gates", "load_measurements", "standing", "summary", "validation_table"]
