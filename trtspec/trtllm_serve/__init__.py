"""trtllm-serve's HTTP contract served on CPU with trtspec's reference engine (`trtspec serve --trtllm-serve`).

NVIDIA's `trtllm-serve` (TensorRT-LLM 1.2.1, the default target) is a FastAPI app over the LLM API; this package is
the same HTTP contract over `trtspec.spec.host.EngineHost` (one engine, its one EngineLoop), so `trtspec monitor`, the
sweep's OpenAI backend and NVIDIA's own clients can be run end to end against a real server without a GPU:

- `protocol.py`: request bodies -> the engine's SamplingParams (pure: no torch, no aiohttp), OpenAI error objects,
  response and stream-chunk bodies;
- `app.py`: the aiohttp app (routes, SSE streaming, client disconnects, `/trtspec/metrics`);
- `server.py`: the server process (`python -m trtspec.trtllm_serve`): arguments, engine load, signals, and the
  iteration statistics `/metrics` shows (`enable_iter_perf_stats`, the release's bound `BOUND_KEY`);
- `launch.py`: the launcher `trtspec serve --trtllm-serve` runs: the command (pure), the supervised child
  (trtspec/supervise.py), readiness and stop.

Sources (NVIDIA/TensorRT-LLM, read through the project's source index; no stored file is at the v1.2.1 tag
376f7e1bd8, see targets/pytorch-workflow.json `not_pinned`):
- tensorrt_llm/serve/openai_server.py, a 1.2-era stored version (commit e7f7345e31e574b5d0918b756b871882c7346b3c,
  index id 456200087: it has /v1/responses, the DeepSeek-v3.2 config workaround and the disagg cluster worker, and no
  visual-gen routes): the routes (/health, /health_generate, /version, /v1/models, /metrics, /perf_metrics,
  /v1/completions, /v1/chat/completions, /v1/responses, /prometheus/metrics with return_perf_metrics), `/health` = an
  empty 200, `/version` = {"version": ...}, `/v1/models` = ModelList([ModelCard(id=<the model directory's name>)]),
  `/metrics` = the iterations `llm.get_stats_async` hands over since the previous call (a JSON list), errors as
  `ErrorResponse` with status 400 (`create_error_response`), `data: [DONE]` after the last stream chunk, a client that
  disconnects aborts its request (`await_disconnected`), and a request's `model` is never read by `openai_completion`
  or `openai_chat` (any name is answered, here too).
- tensorrt_llm/serve/openai_protocol.py @0076e9390e1ed11515f149eec356f5a03f4a00d8 (newer than 1.2.1; the classes used
  here are the long-standing ones): ErrorResponse {object "error", message, type, param, code}, ModelCard
  {id, object "model", created, owned_by "tensorrt_llm"}, UsageInfo, StreamOptions (include_usage defaults to true
  once stream_options is given; stream_options without stream is refused), CompletionRequest / ChatCompletionRequest
  fields and defaults (extra fields forbidden; temperature and top_p unset mean 1.0; top_k 0 is off; n 1).
- tensorrt_llm/serve/postprocess_handlers.py @01bf19231d29d8f0766e31c117d1cf39ed00d3d5 (index id 57801403953): the
  `model` of a response and of every chunk is the request's (`ChatPostprocArgs` / `CompletionPostprocArgs`
  `.from_request` take `model=request.model`; only several prompts merged get the served name), stream chunks (completions:
  every field; chat: none-valued fields left out, a first chunk with the role), the usage-only last chunk with
  `choices: []` when stream_options.include_usage, response ids `cmpl-...` / `chatcmpl-...`.
- iteration statistics (trtspec/targets/iteration-stats.json has the facts and their sources; each row is written by
  `trtspec.contracts.trtllm_iterations.iteration_row` for the release served): enable_iter_perf_stats and
  iter_stats_max_iterations are LLM-API arguments of 1.2.1; without enable_iter_perf_stats the PyTorch backend hands
  over no iterations (_torch/pyexecutor/py_executor.py `get_latest_iteration_stats` returns [], index ids 643520330
  and 736889464), so `/metrics` answers `[]`. What bounds them differs per release (server.py `BOUND_KEY`, from the
  facts file's `enabling_options` and `queue_bounds`): the C++ executor keeps the most recent
  iter_stats_max_iterations (ExecutorConfig's default 1000, NVIDIA's bindings test, index id 2423182398); 1.2.1's
  PyTorch executor bounds its list by max(max_stats_len, 1) (default 1000), iter_stats_max_iterations has no effect
  there and its server's queue has no bound; 1.3.0rc29's server holds iter_stats_max_iterations rows (None or 0:
  1000, negative: unbounded). This server keeps the newest rows by the served release's rule (a negative
  iter_stats_max_iterations is capped at 100000) between two GETs, and a GET answers at once (trtllm-serve's waits up
  to 2 s for one more row).

docs/trtllm-serve.md lists what this server implements and what it refuses.
"""
