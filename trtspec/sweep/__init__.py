"""Accept-rate sweeps, the cost model and reports.

grid (SweepSpec, cases) -> runner (+ backend_engine / backend_triton) -> records (results.jsonl) -> analysis
(+ costmodel) -> report (+ plots). Only the backends import torch or tritonclient, and only when used.
"""
