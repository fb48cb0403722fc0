"""Training a run: calibration, preparing, the loop, execution, resume, distributed runs.
"""
