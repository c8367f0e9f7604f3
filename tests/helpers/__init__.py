"""Shared test helpers: the tiny offline model, brute-force oracles, case tables, shims and subprocess workers."""
