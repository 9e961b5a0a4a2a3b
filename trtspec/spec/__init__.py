"""The reference speculative-decoding engine (imports torch; never imports build/triton/sweep/cli code).

Module map: model.py (Llama runner + KV cache), sampling.py, verify.py (chain verifiers), proposers/, params.py,
metrics.py, engine.py. See docs in each module and shared/design/ARCHITECTURE.md for the step loop.
"""
