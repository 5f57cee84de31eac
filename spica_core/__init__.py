"""Spica's domain as plain Python, one package per stage of the sweep (see docs/design.md).

No Prefect import anywhere here, and the engines are imported only where they are called.
"""
