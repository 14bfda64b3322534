"""Teammates the broker starts and keeps running: the runtime, and ``broker demo``."""
