"""Triton Python model `tensorrt_llm` / `tensorrt_llm_draft` of the torch flavour: trtspec's reference engine behind
the tensors of NVIDIA's `tensorrt_llm` model (see trtspec.triton.engine_model).

The logic lives in the trtspec package so it is tested and versioned with the engine; this file only wires Triton's
`pb_utils` into it. The server's Python environment must have trtspec installed (or on PYTHONPATH). The backend stub
runs its interpreter ignoring the environment (`sys.flags.ignore_environment`), so PYTHONPATH is applied here: the
served model imports the same trtspec as the process that started the server (a checkout, not another install).
"""

import os
import sys

for _entry in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
    if _entry not in sys.path:
        sys.path.insert(0, _entry)

import triton_python_backend_utils as pb_utils  # noqa: E402

from trtspec.triton.engine_model import EngineModel  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        self.model = EngineModel(args, pb_utils)

    def execute(self, requests):
        return self.model.execute(requests)

    def finalize(self):
        self.model.close()
