"""The reference speculative-decoding engine (imports torch; never imports build/triton/sweep/cli code).

Module map: model.py (Llama runner + KV cache), logits_process.py (penalties, bans, min tokens: target logits + a row's
context -> processed logits), sampling.py, verify.py (chain verifiers), tree.py, proposers/ (incl. external.py: a
caller's draft), params.py, metrics.py, engine.py, serving.py. See docs in each module and shared/design/ARCHITECTURE.md for the step loop.
"""
