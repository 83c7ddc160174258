"""commodel: analytical models of communication and computation in multi-GPU and HPC systems.

Every number commodel prints traces to a formula (in a docstring) and to hardware parameters (in
``hardware_db/``, each with its source).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("commodel")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0"
