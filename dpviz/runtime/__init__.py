"""What runs dpviz's work: the worker pool, threads and their CPU policy, and imports under one lock.

A leaf package: it imports nothing of dpviz's, so every layer above may start workers and threads.
"""
