"""Pricing: one declaration per job kind and, per kind, one function that prices a table of jobs.

It sits above the models (:mod:`commodel.workloads`, :mod:`commodel.comm`, :mod:`commodel.compute`,
:mod:`commodel.ops`) and below everything that uses them (:mod:`commodel.explore`,
:mod:`commodel.validate`, :mod:`commodel.studies`, :mod:`commodel.report`, the CLI). The scalar
:func:`~commodel.pricing.run.train` and :func:`~commodel.pricing.run.serve` are the table functions on
one row, so every front end gives the same answer for the same job.
"""
