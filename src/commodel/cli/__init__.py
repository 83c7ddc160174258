"""Command-line interface: parse, call the library, print. No model logic here.

Every user error (unknown name, malformed size, impossible layout) is a :class:`CommodelError`,
printed as one ``error:`` line on stderr with exit code 2.

Each command lives in a module of this package (:data:`COMMANDS`) that imports what it calls at its
top and registers on the root app (:mod:`commodel.cli.root`) when imported. :func:`main` imports only
the module of the command being run (found past the root's options, :func:`command_of`), so a
command's start pays for its own imports, not for all of commodel's (about 1 s with pandas,
matplotlib, pymoo and Dask); where no command runs (``--help``, a misspelled name) a listing of
stand-ins carrying the commands' docstrings answers (:func:`listing_app`). ``commodel.cli.app``
(tests) is the app with every command.
"""

from __future__ import annotations

import ast
import inspect
import sys
import warnings
from importlib import import_module
from importlib.util import find_spec
from pathlib import Path

import typer

from commodel.errors import CommodelError

#: Command (or command group) -> the module of this package that defines it, in the order ``--help``
#: lists them.
COMMANDS = {
    "sweep": "sweep",
    "train": "jobs",
    "serve": "jobs",
    "compare": "compare",
    "collective": "collective",
    "overlap": "overlap",
    "sensitivity": "sensitivity",
    "validate": "validation",
    "check": "check",
    "hw": "hardware",
    "model": "models",
    "roofline": "roofline",
    "comm": "comm",
    "study": "studies",
    "calibrate": "calibrate",
}


#: The root's options that take a value (``--hardware PATH``), which the command's name follows.
ROOT_VALUE_OPTIONS = ("--hardware",)


def command_of(args: list[str]) -> str | None:
    """The command ``args`` (the arguments after ``commodel``) run: the first that names one, past the
    root's options and their values (``--hardware f.toml train``); None for none (``--help``)."""
    values = iter(args)
    for arg in values:
        if arg in ROOT_VALUE_OPTIONS:
            next(values, None)  # its value
        elif not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def command_app(command: str | None = None) -> typer.Typer:
    """The root app with ``command`` registered (with every command when it names none of them)."""
    modules = [COMMANDS[command]] if command in COMMANDS else COMMANDS.values()
    for module in dict.fromkeys(modules):
        import_module(f"commodel.cli.{module}")
    return import_module("commodel.cli.root").app


def listing_app() -> typer.Typer:
    """A root app whose commands are stand-ins carrying each command's docstring, read from its
    module's source, not imported (the commands' modules import pandas, SciPy and pymoo: about 0.7 s):
    what answers when no command runs (``--help``, no command, a misspelled one), as the whole app
    would."""
    root = import_module("commodel.cli.root")
    listing = root.root_app()
    for name, module in COMMANDS.items():
        if name not in root.GROUPS:
            listing.command(name, help=_docstring(module, name))(_stand_in)
    return listing


def _docstring(module: str, function: str) -> str:
    """The docstring of ``function`` in this package's ``module``, from its source (imported where
    the package ships none, as a zipped or compiled install may)."""
    name = f"commodel.cli.{module}"
    origin = getattr(find_spec(name), "origin", None) or ""
    if not origin.endswith(".py") or not Path(origin).is_file():
        return inspect.getdoc(getattr(import_module(name), function)) or ""
    tree = ast.parse(Path(origin).read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    return ast.get_docstring(node) or ""


def _stand_in() -> None:  # pragma: no cover - a listing's commands are never run
    raise CommodelError("internal: a command of the listing ran")


def __getattr__(name: str) -> typer.Typer:
    """``app``: the root app with every command."""
    if name != "app":
        raise AttributeError(f"module 'commodel.cli' has no attribute {name!r}")
    return command_app()


def _parser_errors() -> object:
    """The option parser's exception module (typer vendors click from 0.2x on; older ones use click)."""
    try:
        from typer._click import exceptions  # optional: typer 0.2x vendors click
    except ImportError:  # pragma: no cover - older typer
        from click import exceptions  # optional: older typer depends on click
    return exceptions


def one_line_warning(message: Warning | str, category: type[Warning], *_: object, **__: object) -> None:
    """A warning as one ``note:`` line on stderr, without the source path and line Python prints."""
    text = " ".join(str(message).split())
    typer.echo(f"note: {text} ({category.__name__})", err=True)


def main() -> None:
    """Console entry point: run the command named first, turning user errors (ours, and the option
    parser's) into one ``error:`` line and exit code 2, and warnings into one ``note:`` line."""
    warnings.showwarning = one_line_warning
    errors = _parser_errors()
    try:
        # standalone_mode=False: an Exit(n) a command raised comes back as n
        command = command_of(sys.argv[1:])
        app = command_app(command) if command else listing_app()  # no command runs without one
        code = app(standalone_mode=False)
    except CommodelError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except errors.NoArgsIsHelpError as exc:  # a bare command group: its help, as usual
        typer.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        sys.exit(0)
    except errors.UsageError as exc:
        where = f" ({exc.ctx.command_path})" if exc.ctx else ""
        typer.echo(f"error{where}: {exc.format_message()}; see --help", err=True)
        sys.exit(2)
    except errors.ClickException as exc:
        typer.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("interrupted: finished sweep chunks are kept; rerun with --resume to continue", err=True)
        sys.exit(130)
    if isinstance(code, int) and code:
        sys.exit(code)
