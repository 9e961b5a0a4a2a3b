"""Triton Python model `tensorrt_llm` of the torch flavour's llmapi repository: trtspec's reference engine behind the
tensors of NVIDIA's llmapi model (see trtspec.triton.llmapi_model).

The logic lives in the trtspec package; this file only wires Triton's `pb_utils` into it. The backend stub runs its
interpreter ignoring the environment (`sys.flags.ignore_environment`), so PYTHONPATH is applied here: the served
model imports the same trtspec as the process that started the server.
"""

import os
import sys

for _entry in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
    if _entry not in sys.path:
        sys.path.insert(0, _entry)

import triton_python_backend_utils as pb_utils  # noqa: E402

from trtspec.triton.llmapi_model import LlmapiModel  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        self.model = LlmapiModel(args, pb_utils)

    def execute(self, requests):
        return self.model.execute(requests)

    def finalize(self):
        self.model.close()
