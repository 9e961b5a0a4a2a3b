"""trtspec: speculative decoding that pays off in LLM serving.

Importing the package is cheap and side-effect free: heavy dependencies (torch, transformers, tritonclient,
tensorrt_llm) are imported inside the functions that need them.
"""

__version__ = "0.1.0"
