"""The torch flavour's engine models: request parsing (NVIDIA's tensorrt_llm tensors -> engine jobs), error codes,
replies and metrics, without a server (fake pb_utils). tests/triton/test_server_hardening.py checks the codes on a
real tritonserver."""

from __future__ import annotations

import numpy as np
import pytest

from trtspec.contracts.engine import EngineConfig
from trtspec.errors import ConfigError, OverloadedError, RequestError, ServerError
from trtspec.triton.engine_reply import Reply, ReplyClosed, triton_error
from trtspec.triton.engine_request import engine_features, parse_request, word_lists
from trtspec.triton.spec_metrics import SpecMetrics

PARAMS = EngineConfig(target="tiny", method="draft_target", max_k=6, default_k=3, max_input_len=8, max_output_len=16)
VOCAB = 64


def tensors(**values):
    base = {"input_ids": np.array([[5, 6, 7]], dtype=np.int32), "input_lengths": np.array([3], dtype=np.int32),
            "request_output_len": np.array([4], dtype=np.int32)}
    base.update({k: (None if v is None else np.asarray(v)) for k, v in values.items()})
    return base.get


def test_unset_controls_mean_what_they_mean_to_tensorrt_llm():
    request = parse_request(tensors(), PARAMS, VOCAB)
    (job,) = request.jobs
    assert job.prompt_ids == [5, 6, 7] and job.spec.k == 3 and job.sampling.max_new_tokens == 4
    assert not request.streaming and not job.exclude_input_in_output  # NVIDIA's default: the prompt is output
    # unset temperature is 1.0 but unset top_k and top_p mean greedy; the seed is 0; only end_id stops
    assert job.sampling.greedy and job.sampling.seed == 0 and job.sampling.ignore_eos
    assert job.sampling.stop_token_ids == () and job.end_id is None
    (job,) = parse_request(tensors(runtime_top_k=[0], runtime_top_p=[0.0]), PARAMS, VOCAB).jobs
    assert job.sampling.greedy  # top_p <= 0 counts as unset
    (job,) = parse_request(tensors(runtime_top_k=[5], temperature=[0.5]), PARAMS, VOCAB).jobs
    assert (job.sampling.top_k, job.sampling.top_p) == (5, 1.0) and not job.sampling.greedy


def test_values_reach_the_job():
    request = parse_request(tensors(input_lengths=[2], num_draft_tokens=[5], temperature=[0.7], runtime_top_k=[4],
                                    runtime_top_p=[0.9], random_seed=[11], end_id=[1], streaming=[True],
                                    exclude_input_in_output=[True], return_perf_metrics=[True]), PARAMS, VOCAB)
    (job,) = request.jobs
    assert job.prompt_ids == [5, 6] and job.spec.k == 5 and request.streaming and request.return_perf_metrics
    assert (job.sampling.temperature, job.sampling.top_k, job.sampling.seed) == (pytest.approx(0.7), 4, 11)
    assert job.sampling.top_p == pytest.approx(0.9) and job.sampling.stop_token_ids == (1,) and job.end_id == 1
    assert job.exclude_input_in_output
    draft = EngineConfig(target="tiny-draft", method="none", default_k=0, max_k=6)
    assert parse_request(tensors(num_draft_tokens=[4]), draft, VOCAB).jobs[0].spec.k == 0  # plain decoding


def test_batch_rows_and_return_sequences_become_jobs():
    """One job per (row, sequence): rows keep their own lengths and controls; sequence i is seeded seed + i."""
    request = parse_request(tensors(input_ids=[[5, 6, 7], [8, 9, 0]], input_lengths=[3, 2],
                                    request_output_len=[[4], [6]], num_return_sequences=[[3], [3]],
                                    random_seed=[[10], [20]], runtime_top_k=[[2], [2]]), PARAMS, VOCAB)
    assert (request.batch_size, request.num_return_sequences) == (2, 3)
    assert [(j.batch_index, j.sequence_index) for j in request.jobs] == [(b, s) for b in (0, 1) for s in (0, 1, 2)]
    assert [j.sampling.seed for j in request.jobs] == [10, 11, 12, 20, 21, 22]
    assert [j.prompt_ids for j in request.jobs[2:4]] == [[5, 6, 7], [8, 9]]
    assert [j.sampling.max_new_tokens for j in request.jobs[2:4]] == [4, 6]
    unseeded = parse_request(tensors(num_return_sequences=[2], runtime_top_k=[2]), PARAMS, VOCAB)
    assert [j.sampling.seed for j in unseeded.jobs] == [0, 1]  # an unset seed counts as 0


def test_tensorrt_llm_controls_reach_the_engine():
    """Word lists, penalties, min_length, log-probs and a caller's draft become the engine's request parameters."""
    request = parse_request(tensors(
        stop_words_list=[[[7, 8, 9], [2, 3, -1]]], bad_words_list=[[[4], [1]]], min_length=[2],
        repetition_penalty=[1.3], presence_penalty=[0.5], frequency_penalty=[0.25], return_log_probs=[True],
        draft_input_ids=[[9, 10]], end_id=[1]), PARAMS, VOCAB)
    (job,) = request.jobs
    sampling = job.sampling
    assert sampling.stop_words == ((7, 8), (9,)) and sampling.bad_words == ((4,),) and sampling.min_tokens == 2
    assert (sampling.repetition_penalty, sampling.presence_penalty, sampling.frequency_penalty) == (
        pytest.approx(1.3), 0.5, 0.25)
    assert sampling.return_log_probs and sampling.normalize_log_probs and job.return_log_probs
    assert job.spec.draft_token_ids == (9, 10) and job.spec.method == "none"  # like a draft_tokens_external engine
    with pytest.raises(RequestError, match="repetition_penalty"):
        parse_request(tensors(repetition_penalty=[0.0]), PARAMS, VOCAB)


def test_word_lists_in_tensorrt_llm_format():
    ids = np.array([[[7, 8, 9, 0], [2, 3, -1, -1]], [[4, 0, 0, 0], [1, -1, -1, -1]]], dtype=np.int32)
    assert word_lists(ids, 0, "stop_words_list") == ((7, 8), (9,))
    assert word_lists(ids, 1, "stop_words_list") == ((4,),)
    assert word_lists(np.zeros((1, 2, 0), np.int32), 0, "x") == ()  # preprocessing's "no words"
    assert word_lists(np.array([[[0], [-1]]]), 0, "x") == ()  # ... and its one-padded form
    with pytest.raises(RequestError, match=r"stop_words_list has shape \[1, 3\]"):
        word_lists(np.zeros((1, 3)), 0, "stop_words_list")


def test_a_stop_request_is_recognised_before_anything_else():
    request = parse_request(tensors(stop=[True], input_ids=[[0]], input_lengths=[0], request_output_len=[0]),
                            PARAMS, VOCAB)
    assert request.stop and request.jobs == ()


NOTHING = frozenset()  # an engine without the newer request controls


@pytest.mark.parametrize("values, message, features", [
    ({"input_ids": None}, "input_ids is required", None),
    ({"input_lengths": [0]}, "empty prompt", None),
    ({"input_lengths": [9]}, "exceeds the 3 tokens", None),
    ({"input_ids": [list(range(9))], "input_lengths": [9]}, "input_lengths=9: the prompt is longer than max_input_len=8",
     None),
    ({"input_ids": [[5, 64]], "input_lengths": [2]}, "input_ids: token id 64 is outside the vocabulary [0, 64)", None),
    ({"request_output_len": [17]}, "request_output_len=17 must be in [1, max_output_len=16]", None),
    ({"runtime_top_k": [-1]}, "runtime_top_k=-1 must be >= 0", None),
    ({"temperature": [-0.5]}, "temperature=-0.5 must be a finite number >= 0", None),
    ({"temperature": [np.inf]}, "temperature=inf must be a finite number >= 0", None),
    ({"temperature": [np.nan]}, "temperature=nan must be a finite number >= 0", None),
    ({"runtime_top_p": [np.inf]}, "runtime_top_p=inf", None),
    ({"repetition_penalty": [np.inf]}, "repetition_penalty=inf: must be a finite number > 0", None),
    ({"presence_penalty": [np.nan]}, "presence_penalty=nan: must be a finite number", None),
    ({"frequency_penalty": [-np.inf]}, "frequency_penalty=-inf: must be a finite number", None),
    ({"num_draft_tokens": [7]}, "num_draft_tokens (k)=7: must be in [0, 6]", None),
    ({"temperature": [[1.0, 2.0]]}, "temperature must hold one value", None),
    ({"temperature": [1.0, 2.0]}, "temperature has shape [2]: its first (batch) dimension must be 1", None),
    ({"beam_width": [2]}, "beam_width=2: the reference engine has no beam search", None),
    ({"num_return_sequences": [0]}, "num_return_sequences=0 must be >= 1", None),
    ({"lora_task_id": [3]}, "lora_task_id: LoRA is not supported by the reference engine", None),
    ({"prompt_embedding_table": [[[0.5]]]}, "prompt_embedding_table: prompt tables", None),
    ({"guided_decoding_guide_type": [["json"]]}, "guided_decoding_guide_type: guided decoding", None),
    ({"draft_logits": [[[0.1]]]}, "draft_logits: draft logits", None),
    ({"embedding_bias": [[0.0, 1.5]]}, "embedding_bias: a logit bias is not supported", None),
    ({"return_generation_logits": [True]}, "return_generation_logits=true: the reference engine does not return "
     "logits", None),
    ({"lookahead_window_size": [[4]]}, "lookahead_window_size=4: this model runs lookahead []", None),
    ({"draft_input_ids": [list(range(7))]}, "draft_input_ids has 7 tokens, more than this model's max_k=6", None),
    ({"draft_input_ids": [[1, 70]]}, "draft_input_ids: token id 70 is outside the vocabulary", None),
    ({"draft_input_ids": [[1, 2]]}, "draft_input_ids: verifying a caller's draft is not supported yet", NOTHING),
    ({"stop_words_list": [[[7], [1]]]}, "stop_words_list: not supported yet", NOTHING),
    ({"repetition_penalty": [1.2]}, "repetition_penalty: not supported yet", NOTHING),
    ({"return_log_probs": [True]}, "return_log_probs: not supported yet", NOTHING),
])  # fmt: skip
def test_parse_request_refuses_with_a_clear_message(values, message, features):
    with pytest.raises(RequestError) as info:
        parse_request(tensors(**values), PARAMS, VOCAB, features=features)
    assert message in str(info.value)


def test_neutral_values_of_missing_controls_are_accepted():
    """NVIDIA's clients send empty word lists and neutral controls on every request."""
    request = parse_request(tensors(stop_words_list=np.zeros((1, 2, 0), np.int32), bad_words_list=[[[0], [-1]]],
                                    repetition_penalty=[1.0], presence_penalty=[0.0], return_log_probs=[False],
                                    embedding_bias=np.zeros((1, 0), np.float32), beam_width=[1],
                                    return_context_logits=[False], len_penalty=[1.0]), PARAMS, VOCAB,
                            features=NOTHING)
    assert len(request.jobs) == 1


@pytest.mark.parametrize("values, message", [
    ({"streaming": [True]}, "streaming=true needs a decoupled model"),
    ({"input_ids": [[5], [6]], "input_lengths": [1, 1], "request_output_len": [4, 4]}, "batch size 2 needs a decoupled"),
    ({"num_return_sequences": [2]}, "num_return_sequences=2 needs a decoupled model"),
])  # fmt: skip
def test_several_responses_need_a_decoupled_model(values, message):
    with pytest.raises(RequestError, match=message):
        parse_request(tensors(**values), PARAMS, VOCAB, decoupled=False)
    parse_request(tensors(**values), PARAMS, VOCAB, decoupled=True)


def test_engine_features_name_the_params_fields():
    assert {"temperature", "top_k", "seed", "method", "k"} <= engine_features()


class FakeMetric:
    def __init__(self, labels):
        self.labels, self.value = labels, 0.0

    def increment(self, value):
        self.value += value

    def set(self, value):
        self.value = value


class FakeFamily:
    COUNTER, GAUGE = "counter", "gauge"
    created: dict = {}

    def __init__(self, name, description, kind):
        self.name, self.kind, self.metrics = name, kind, []
        FakeFamily.created[name] = self

    def Metric(self, labels):  # noqa: N802 - pb_utils' spelling
        metric = FakeMetric(labels)
        self.metrics.append(metric)
        return metric


class FakeTritonError:
    INTERNAL, INVALID_ARG, UNAVAILABLE = "INTERNAL", "INVALID_ARG", "UNAVAILABLE"

    def __init__(self, message, code="INTERNAL"):
        self.message, self.code = message, code


class FakeResponse:
    def __init__(self, output_tensors, error=None):
        self.output_tensors, self.error = output_tensors, error


class FakePb:
    MetricFamily = FakeFamily
    TritonError = FakeTritonError
    InferenceResponse = FakeResponse
    TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1


@pytest.mark.parametrize("error, code", [
    (RequestError("temperature=inf must be a finite number >= 0"), "INVALID_ARG"),
    (ConfigError("k", 9, "must be <= max_k=6", hint="send at most 6"), "INVALID_ARG"),  # a parameter the engine refuses
    (OverloadedError("engine overloaded", hint="retry later"), "UNAVAILABLE"),
    (ServerError("the serving loop is shut down"), "INTERNAL"),
    (RuntimeError("CUDA error"), "INTERNAL"),
])  # fmt: skip
def test_triton_error_codes_bad_input_as_invalid_arg_and_the_rest_as_failures(error, code):
    answer = triton_error(FakePb, error)
    assert answer.code == code
    assert answer.message.startswith(str(error)) and (getattr(error, "hint", None) or "") in answer.message  # + hint


class FakeSender:
    def __init__(self):
        self.sent = []

    def send(self, response=None, flags=0):
        self.sent.append((response, flags))


class FakeRequest:
    def __init__(self):
        self.sender = FakeSender()

    def get_response_sender(self):
        return self.sender


class FakeModel:
    pb, decoupled = FakePb, True


def test_an_error_is_the_final_response_and_nothing_follows_it():
    """A batch of 2 rows is 2 jobs: when one fails, its error ends the request (FINAL) and the other job's later
    responses are refused, so the serving loop aborts it (a strict-mode gRPC stream is closed by the error)."""
    request = FakeRequest()
    reply = Reply(FakeModel(), request, parse_request(tensors(input_ids=[[5, 6, 7], [5, 6, 8]],
                                                               input_lengths=[3, 3], request_output_len=[4, 4]),
                                                       PARAMS, VOCAB))
    assert reply.pending == 2
    reply.send(FakeResponse(["tokens"]), last_of_job=False)
    reply.error(OverloadedError("engine overloaded"))
    assert [flags for _, flags in request.sender.sent] == [0, 1] and reply.done.is_set()
    assert request.sender.sent[-1][0].error.code == "UNAVAILABLE"
    with pytest.raises(ReplyClosed):
        reply.send(FakeResponse(["more"]), last_of_job=True)
    reply.error(RuntimeError("a second failure"))  # already answered: dropped, not raised
    assert len(request.sender.sent) == 2


def test_metrics_accumulate_requests_and_positions():
    from trtspec.contracts.metrics import AcceptanceStats

    metrics = SpecMetrics(FakePb, {"model": "m"})
    first, second = AcceptanceStats(), AcceptanceStats()
    first.observe(3, 2)
    first.observe(3, 0)
    second.observe(2, 2)
    metrics.finished("length", first)
    metrics.finished("stop", second)
    metrics.finished("abort")
    family = FakeFamily.created
    assert family["trtspec_spec_decode_num_drafts"].metrics[0].value == 3
    assert family["trtspec_spec_decode_num_draft_tokens"].metrics[0].value == 8
    assert family["trtspec_spec_decode_num_accepted_tokens"].metrics[0].value == 4
    per_pos = {m.labels["position"]: m.value for m in family["trtspec_spec_decode_num_accepted_tokens_per_pos"].metrics}
    assert per_pos == {"0": 2, "1": 2, "2": 0}  # k=3 drafts have a third position, never accepted here
    assert family["trtspec_spec_decode_mean_acceptance_length"].metrics[0].value == pytest.approx(1 + 4 / 3)
    assert family["trtspec_spec_decode_mean_acceptance_length"].kind == "gauge"
    requests = {m.labels["finish_reason"]: m.value for m in family["trtspec_spec_decode_requests"].metrics}
    assert requests == {"length": 1, "stop": 1, "abort": 1}
    rejected = {m.labels["position"]: m.value for m in family["trtspec_spec_decode_num_rejections_per_pos"].metrics}
    assert rejected == {"0": 1, "1": 0, "2": 1}  # (3, 2) rejected at 2, (3, 0) at 0, (2, 2) accepted all
    assert sum(rejected.values()) == first.num_rejections + second.num_rejections


def test_the_cancellation_check_asks_the_sender_at_most_once_per_period():
    """The loop polls every turn; the sender's is_cancelled() (a round trip to tritonserver) is asked once a period,
    and a cancellation it reports holds from then on."""
    import time

    from trtspec.triton.engine_model import PeriodicCheck

    asked, gone = [], [False]
    check = PeriodicCheck(lambda: asked.append(1) or gone[0], period_s=0.05)
    assert not any(check() for _ in range(100)) and not asked  # within the first period: not asked
    time.sleep(0.06)
    assert not check() and not any(check() for _ in range(100)) and len(asked) == 1
    gone[0] = True
    time.sleep(0.06)
    assert check() and all(check() for _ in range(10)) and len(asked) == 2  # cancelled for good, not asked again


def test_the_responder_sends_in_order_off_the_loop_thread_and_a_failed_send_closes_the_reply():
    """Responses go out from the Responder's thread in the order they were put; a send that fails there (the client
    went away) closes the reply: its next response raises ReplyClosed, so the serving loop aborts the request."""
    import threading

    from trtspec.triton.engine_reply import Responder

    class Model(FakeModel):
        responder = Responder()

    class GoneSender(FakeSender):
        def send(self, response=None, flags=0):
            raise RuntimeError("the client went away")

    request = FakeRequest()
    threads: set[str] = set()
    send = request.sender.send
    request.sender.send = lambda response=None, flags=0: threads.add(threading.current_thread().name) or send(
        response, flags)
    reply = Reply(Model(), request, parse_request(tensors(), PARAMS, VOCAB))
    for i in range(50):
        reply.send(FakeResponse([str(i)]), last_of_job=i == 49)
    gone = FakeRequest()
    gone.sender = GoneSender()
    broken = Reply(Model(), gone, parse_request(tensors(), PARAMS, VOCAB))
    broken.send(FakeResponse(["a"]), last_of_job=False)
    Model.responder.close()
    assert [r.output_tensors for r, _ in request.sender.sent] == [[str(i)] for i in range(50)]
    assert [flags for _, flags in request.sender.sent][-2:] == [0, 1] and threads == {"trtspec-responder"}
    with pytest.raises(ReplyClosed):
        broken.send(FakeResponse(["b"]), last_of_job=True)


class FailingSender(FakeSender):
    """A sender whose first `failures` sends raise (a stub-side error: shared memory exhausted, a closed sender)."""

    def __init__(self, failures=1):
        super().__init__()
        self.failures = failures

    def send(self, response=None, flags=0):
        if self.failures:
            self.failures -= 1
            raise RuntimeError("shared memory pool exhausted")
        super().send(response, flags)


@pytest.mark.parametrize("failures", [1, 2])
def test_a_failed_send_ends_the_request_with_a_final_error(failures):
    """A non-final response that the Responder cannot send ends the request with an error response flagged FINAL
    (its client does not hang); the loop's next response raises ReplyClosed. When the error cannot be sent either,
    it is logged and the request still ends (done, on_done)."""
    from trtspec.triton.engine_reply import Responder

    class Model(FakeModel):
        responder = Responder()

    request, ended = FakeRequest(), []
    request.sender = FailingSender(failures)
    reply = Reply(Model(), request, parse_request(tensors(streaming=[True]), PARAMS, VOCAB),
                  on_done=lambda: ended.append(1))
    reply.send(FakeResponse(["t0"]), last_of_job=False)
    assert reply.done.wait(5) and ended == [1]
    with pytest.raises(ReplyClosed):
        reply.send(FakeResponse(["t1"]), last_of_job=True)  # what the serving loop does at the next delta
    Model.responder.close()
    if failures == 1:
        ((response, flags),) = request.sender.sent
        assert flags == FakePb.TRITONSERVER_RESPONSE_COMPLETE_FINAL and response.error.code == "INTERNAL"
        assert "shared memory pool exhausted" in response.error.message
    else:
        assert request.sender.sent == []


def test_a_response_that_cannot_be_built_fails_the_request():
    """A sink's deliver() that raises anything but ReplyClosed (here the metrics, building the final response) fails
    the request: the serving loop calls sink.fail, and the client gets an error flagged FINAL."""
    from trtspec.spec.detokenize import IncrementalDetokenizer
    from trtspec.spec.engine import RequestDelta
    from trtspec.spec.serving import EngineLoop, _Entry
    from trtspec.triton.engine_reply import JobSink

    class Metrics:
        calls = 0

        def finished(self, *args, **kwargs):
            Metrics.calls += 1
            if Metrics.calls == 1:
                raise ValueError("a histogram refused the latency")

    class Model(FakeModel):
        metrics = Metrics()

    request = FakeRequest()
    parsed = parse_request(tensors(streaming=[True]), PARAMS, VOCAB)
    reply = Reply(Model(), request, parsed)
    loop = object.__new__(EngineLoop)
    loop._entries, loop._by_handle = {}, {}
    loop.engine = type("Engine", (), {"abort": lambda self, request_id: None})()
    entry = _Entry(1, JobSink(reply, parsed.jobs[0]), None, IncrementalDetokenizer(None), request_id=0)
    loop._entries[0], loop._by_handle[1] = entry, entry
    loop._deliver(entry, RequestDelta(request_id=0, token_ids=[9], finished=True, finish_reason="length"))
    ((response, flags),) = request.sender.sent
    assert flags == FakePb.TRITONSERVER_RESPONSE_COMPLETE_FINAL and "histogram refused" in response.error.message
    assert reply.done.is_set() and not loop._entries


def test_no_response_follows_the_final_one_across_threads():
    """The final flag is decided and the response queued under the same lock: a job's response that the loop thread
    sends while another thread answers the request with an error is queued before the error, never after it."""
    import threading
    import time

    from trtspec.triton.engine_reply import Responder

    class SlowPut(Responder):
        def put(self, reply, response, flags):
            if threading.current_thread().name == "loop":
                time.sleep(0.05)  # the loop thread is preempted between deciding the flags and queueing
            super().put(reply, response, flags)

    class Model(FakeModel):
        responder = SlowPut()

    request = FakeRequest()
    reply = Reply(Model(), request, parse_request(tensors(input_ids=[[5, 6, 7], [5, 6, 8]], input_lengths=[3, 3],
                                                          request_output_len=[4, 4], streaming=[True, True]),
                                                  PARAMS, VOCAB))
    loop = threading.Thread(target=lambda: reply.send(FakeResponse(["job 0"]), last_of_job=False), name="loop")
    loop.start()
    time.sleep(0.01)
    reply.error(ServerError("the engine loop is shut down"))  # the second job refused on the execute thread
    loop.join()
    Model.responder.close()
    assert [(response.error is None, flags) for response, flags in request.sender.sent] == [(True, 0), (False, 1)]


def test_a_reused_request_id_stops_every_request_with_it():
    """Triton request ids are the client's, not unique: two running requests with one id each keep their handles;
    the first one ending forgets only its own, and a stop request cancels the other."""
    import threading

    from trtspec.spec.engine import RequestDelta
    from trtspec.triton.engine_model import EngineModel

    class Host:
        def __init__(self):
            self.sinks, self.cancelled = [], []

        def submit_to(self, sink, *args, **kwargs):
            self.sinks.append(sink)
            return len(self.sinks)

        def cancel(self, handle):
            self.cancelled.append(handle)

    class Request(FakeRequest):
        def __init__(self, request_id, **values):
            super().__init__()
            self.id, self.get = request_id, tensors(**values)

        def request_id(self):
            return self.id

    class Pb(FakePb):
        Tensor = staticmethod(lambda name, value: (name, value))

        @staticmethod
        def get_input_tensor_by_name(request, name):
            value = request.get(name)
            return None if value is None else type("T", (), {"as_numpy": lambda self: value})()

    model = object.__new__(EngineModel)
    model.pb, model.params, model.vocab_size, model.features, model.decoupled = (
        Pb, PARAMS, VOCAB, engine_features(), True)
    model.host, model._by_request_id, model._ids_lock, model.responder = Host(), {}, threading.Lock(), None
    model.metrics = type("Metrics", (), {"finished": lambda self, *args, **kwargs: None})()
    first = model._submit(Request("42", streaming=[True]))
    second = model._submit(Request("42", streaming=[True]))
    assert model._by_request_id == {"42": [[1], [2]]}
    model.host.sinks[0].deliver(RequestDelta(request_id=0, token_ids=[9], finished=True, finish_reason="length"))
    assert first.done.is_set() and model._by_request_id == {"42": [[2]]}
    stop = model._submit(Request("42", stop=[True]))
    assert model.host.cancelled == [2] and stop.done.is_set() and not second.done.is_set()
    assert model._by_request_id == {}
