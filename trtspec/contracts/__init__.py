"""The bottom layer: the contracts every other package shares, torch-free and server-free.

engine.py (the engine configuration: what a reference engine loads and serves), suffix.py (suffix decoding's
options), metrics.py (acceptance counts and every metric formula), series.py (the Prometheus series, named once),
baseline.py (the deploy-time baseline file), repository.py (the repository record), prompt_log.py (the prompt log's
format), costmodel.py (the cost model's maths), observability.py (Prometheus rules and the Grafana dashboard from the
series), openai.py (a request's speculation in the OpenAI API), control.py (how the operations loop reaches a
server). Nothing here imports a package above it (import-linter contracts in pyproject.toml).
"""
