"""Triton Python model `tensorrt_llm` / `tensorrt_llm_draft` of the torch flavour: trtspec's reference engine behind
the tensors of NVIDIA's `tensorrt_llm` model (see trtspec.triton.engine_model).

The logic lives in the trtspec package so it is tested and versioned with the engine; this file only wires Triton's
`pb_utils` into it. The server's Python environment must have trtspec installed (or on PYTHONPATH).
"""

import triton_python_backend_utils as pb_utils

from trtspec.triton.engine_model import EngineModel


class TritonPythonModel:
    def initialize(self, args):
        self.model = EngineModel(args, pb_utils)

    def execute(self, requests):
        return self.model.execute(requests)

    def finalize(self):
        self.model.close()
