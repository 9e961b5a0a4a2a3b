"""Triton Python model `tensorrt_llm` of the TensorRT-LLM flavour's llmapi repository: NVIDIA's own model.py, run
from where NVIDIA's container ships it; trtspec copies none of it.

The TensorRT-LLM Triton containers (nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3) hold TensorRT-LLM's
`triton_backend/all_models` under /app/all_models (tensorrtllm_backend dockerfile/Dockerfile.triton.trt_llm_backend:
`COPY ... triton_backend/all_models all_models` in WORKDIR /app). Another checkout of the same release works too:
set TRTSPEC_NVIDIA_LLMAPI_DIR to its `triton_backend/all_models/llmapi/tensorrt_llm/1`. NVIDIA's model reads
model.yaml from this model's own directory (pb_utils.get_model_dir()), so the rendered 1/model.yaml is the one used;
its `helpers` module is imported from NVIDIA's directory.
"""

import importlib.util
import os
import sys

NVIDIA_DIR = os.environ.get("TRTSPEC_NVIDIA_LLMAPI_DIR", "/app/all_models/llmapi/tensorrt_llm/1")
_path = os.path.join(NVIDIA_DIR, "model.py")
if not os.path.isfile(_path):
    raise ImportError(f"NVIDIA's llmapi model.py is not at {_path}: serve this repository inside the TensorRT-LLM "
                      "Triton container, or set TRTSPEC_NVIDIA_LLMAPI_DIR to triton_backend/all_models/llmapi/"
                      "tensorrt_llm/1 of a checkout of the same TensorRT-LLM release")
if NVIDIA_DIR not in sys.path:
    sys.path.insert(0, NVIDIA_DIR)
_spec = importlib.util.spec_from_file_location("nvidia_llmapi_model", _path)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)

TritonPythonModel = _module.TritonPythonModel
