"""Triton Inference Server deployment: model-repository rendering, a tritonserver launcher, and a gRPC client.

`render` and `repo_spec` are pure (no torch, no tritonclient at import); `server` starts a real tritonserver;
`client` talks to it over gRPC; `engine_model` is the logic behind the torch flavour's `tensorrt_llm` and
`tensorrt_llm_draft` (the reference engine behind the Python backend; requests parsed in `engine_request`, responses
encoded in `engine_reply`).
"""
