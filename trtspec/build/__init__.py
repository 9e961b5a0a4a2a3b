"""TensorRT-LLM engine builds and torch bundles: preflight -> plan (pure) -> execute (temp dir + rename).

Entry points: `trtspec.config.load_build_spec`, `preflight.run_preflight`, `plan.plan_build`, `execute.execute`,
`bundle.load_bundle`. Nothing here imports torch at import time (the converter imports it when it runs).
"""
