"""commodel: analytical models of communication and computation in multi-GPU and HPC systems.

Every number commodel prints traces to a formula (in a docstring) and to hardware parameters (in
``hardware_db/``, each with its source).
"""


def __getattr__(name: str) -> str:
    """``__version__``, looked up on first use: reading the package metadata costs a command-line
    start about 20 ms."""
    if name != "__version__":
        raise AttributeError(f"module 'commodel' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version  # slow: read on first use only

    try:
        return version("commodel")
    except PackageNotFoundError:  # running from a source tree without installation
        return "0.0.0"
