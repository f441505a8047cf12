"""The generic engine: recorder, observation, coverage data, reports, combine, pytest plugin.

It knows dispatch models (:mod:`nvfp4_harness.model`), never a particular operator.
"""
