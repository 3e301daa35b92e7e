"""Triton model `vllm_model` (Python backend, decoupled): a vLLM `AsyncLLM` whose scheduler is ours.

As in NVIDIA's vLLM backend, `execute` hands each request to an asyncio loop running in its own
thread and returns at once; the coroutine streams the engine's outputs back through the request's
response sender and always ends with a final response or an error. A request whose cancellation
Triton flags is aborted in the engine at its next streamed output, or within `CANCEL_POLL_S` while it
waits, is prefilled or does not stream (Triton 2.51 does not flag every cancelled gRPC stream, and
rarely one through an ensemble: the engine finishes those), and ends with a CANCELLED error, not an
empty final: should Triton flag a request its client did not cancel, that client learns why it ended.
The class travels from the ensemble as tensors, checked against this model's own estimate
(`triton.classes`), and reaches the RPS scheduler in `SamplingParams.extra_args`; requests sent here
directly carry none, and the engine classifies them itself. Before the engine, a request's media are
decoded (and, with the class front end, its input rendered) once, by the front end's workers in class
order (`triton.front_end`), never on the loop. With `RPS_RUN_LOG` set, every engine step, the loop's
lag and each request's stages go to that file (`triton.run_log`).
If the engine dies (its engine-core process or a worker), the requests it held end with an error naming
them, new ones are refused as retryable while a new engine starts in place with the same settings
(`triton.engine_supervisor`), and `is_ready()` says False meanwhile (Triton reads it from python_backend
r26.03 on); if it cannot be restarted, the model asks Triton to unload it, so it is no longer ready.
A request carrying `rps_health` is answered at once, whatever the load, with the engine's state: what
the orchestrator's probes ask (`rps_serve.probe`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from vllm.exceptions import VLLMClientError
from vllm.v1.engine.exceptions import EngineDeadError

from rps_serve.cost.model import CostModel
from rps_serve.cost.online import OnlineCostModel
from rps_serve.cost.runtime import cost_model_at
from rps_serve.scheduling.class_edges import engine_classes
from rps_serve.triton import protocol as p
from rps_serve.triton.additional_outputs import AdditionalOutputs
from rps_serve.triton.backend import (
    error_response,
    log_failure,
    requested_outputs,
    tensor_getter,
)
from rps_serve.triton.class_metrics import ClassMetrics, EngineLoad
from rps_serve.triton.classes import ClassInfo, decide_class, supplied_class
from rps_serve.triton.engine_input import MediaRenderer
from rps_serve.triton.engine_stats import engine_stats_logger
from rps_serve.triton.engine_supervisor import EngineState, EngineSupervisor, restart_deadline_s
from rps_serve.triton.front_end import FrontEnd
from rps_serve.triton.online_costs import CostModelMetrics, ObservedCostFeed, observing_costs
from rps_serve.triton.preprocess import Preprocessor
from rps_serve.triton.prompt_tokens import PromptTokenCounter
from rps_serve.triton.request_progress import RequestProgress
from rps_serve.triton.run_log import ITERATION_DETAILS_ARG, RunLog, watch_loop_lag
from rps_serve.triton.sampling import sampling_params
from rps_serve.triton.settings import FrontEndMode, load_settings
from rps_serve.triton.triton_log import log_to_triton
from rps_serve.triton.vllm_metrics import VllmMetrics
from rps_serve.vllm_plugin.parent_watch import start_parent_watcher

logger = logging.getLogger(__name__)

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
# How often a request in flight checks whether its client cancelled it. The engine reports nothing while
# a request waits or is prefilled, so checking only when an output arrives would run it that long for
# nobody; each check is a round trip to the server, so not too often.
CANCEL_POLL_S = 0.5


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        log_to_triton(pb_utils)
        if not pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"])):
            raise pb_utils.TritonModelException("vllm_model must be decoupled (model_transaction_policy)")
        settings = load_settings(Path(args["model_repository"]).parent, model=args["model_name"])
        self.preprocessor = Preprocessor(PromptTokenCounter(settings.model), settings.media)
        cost_model: CostModel
        if settings.cost_model is not None and settings.cost_model_online.enabled:
            cost_model = OnlineCostModel.from_repository(settings.cost_model, settings.cost_model_online)
            settings = observing_costs(settings)
        else:
            cost_model = cost_model_at(settings.cost_model)
        self.class_source = settings.class_source
        self.metrics = ClassMetrics(pb_utils, args["model_name"])
        # vLLM's own metrics as vllm_backend exports them; made once the engine says its length.
        self.vllm_metrics: VllmMetrics | None = None
        self.model_version = str(args["model_version"])
        self.max_pending = settings.max_pending_requests
        self.pending = 0  # requests between admission and their final response (loop thread only)
        self.policy = settings.policy
        self.run_log = RunLog.from_environment(args["model_name"])
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="vllm-model-loop", daemon=True)
        self.thread.start()
        self.parent_watcher = start_parent_watcher()  # a dead tritonserver takes this stub down
        self.model_name = args["model_name"]
        # The class front end orders the CPU work before the engine by class and renders inputs itself;
        # vLLM's keeps vLLM's own renderer (arrival order), as the stock baselines ship.
        self.class_ordered = settings.front_end_mode is FrontEndMode.CLASS
        self.renderer: MediaRenderer | None = None
        engine_kwargs = settings.engine_kwargs()
        started = time.monotonic()
        starting = asyncio.run_coroutine_threadsafe(self._start_engine(engine_kwargs), self.loop)
        self.engine = starting.result()
        self.parent_watcher.wait_for_a_look()  # it knows the engine's processes from now on
        # Classes as this engine's steps need them (`scheduling.class_edges`), for every policy: the
        # classes the responses and the per-class series report are the ones the scheduler uses.
        token_budget = self.engine.vllm_config.scheduler_config.max_num_batched_tokens
        self.cost_model = engine_classes(cost_model, token_budget)
        asyncio.run_coroutine_threadsafe(self._engine_started(self.engine), self.loop).result()
        deadline_s = settings.engine_restart_deadline_s or restart_deadline_s(time.monotonic() - started)
        self.supervisor = EngineSupervisor(
            self.engine,
            build=lambda: self._build_engine(engine_kwargs),
            on_started=self._engine_started,
            on_state=self._engine_state,
            deadline_s=deadline_s,
        )
        self.health_watch = asyncio.run_coroutine_threadsafe(self.supervisor.watch(), self.loop)
        self.health_watch.add_done_callback(log_failure)
        self.front_end = FrontEnd(settings.front_end_workers, class_ordered=self.class_ordered)
        self.inspector = ThreadPoolExecutor(1, thread_name_prefix="vllm-model-inspect")
        self.cost_feed: ObservedCostFeed | None = None
        self.cost_metrics: CostModelMetrics | None = None
        if isinstance(cost_model, OnlineCostModel):
            self.cost_metrics = CostModelMetrics(pb_utils, args["model_name"], cost_model.lines)
            observed = Path(settings.rps["observed_costs"])
            self.cost_feed = ObservedCostFeed(cost_model, observed, self.loop, self.cost_metrics.updated)
        self.lag_watch = (
            None
            if self.run_log is None
            else asyncio.run_coroutine_threadsafe(watch_loop_lag(self.run_log), self.loop)
        )
        logger.info(
            "%s: %s, policy %s, %d front-end workers (%s front end), engine restart deadline %.0f s",
            self.model_name,
            settings.model,
            settings.policy.value,
            settings.front_end_workers,
            settings.front_end_mode.value,
            deadline_s,
        )

    async def _start_engine(self, kwargs: dict[str, Any]) -> Any:
        # Built on the loop, so that vLLM starts its output handler there at once.
        return self._build_engine(kwargs)

    def _build_engine(self, kwargs: dict[str, Any]) -> Any:
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        if self.run_log is not None:
            kwargs = {**kwargs, ITERATION_DETAILS_ARG: True}
        logger_factory = engine_stats_logger(self._engine_load, self.run_log, self._engine_step)
        return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs), stat_loggers=[logger_factory])

    def _engine_load(self, load: EngineLoad) -> None:
        self.metrics.engine_load(load)
        if self.vllm_metrics is not None:
            self.vllm_metrics.engine_load(load)

    def _engine_step(self, iteration_stats: Any) -> None:
        if self.vllm_metrics is not None:
            self.vllm_metrics.record(iteration_stats)

    async def _engine_started(self, engine: Any) -> None:
        """Make `engine` the one requests go to (at start and after a restart)."""
        if self.vllm_metrics is None:  # on the loop, where vLLM calls its stat loggers
            labels = {"model": self.model_name, "version": self.model_version}
            max_model_len = engine.model_config.max_model_len
            self.vllm_metrics = VllmMetrics(pb_utils, labels, max_model_len)
        renderer = MediaRenderer(engine) if self.class_ordered else None
        if renderer is not None:
            await renderer.prepare()
        self.engine, self.renderer = engine, renderer

    def _engine_state(self, state: EngineState) -> None:
        """Publish the engine's state; once it cannot be restarted, have Triton unload the model so that
        it reports not ready (this works where Triton runs with `--model-control-mode=explicit`)."""
        self.metrics.engine_up(state is EngineState.SERVING)
        if state is EngineState.SERVING:
            self.metrics.engine_restarted()
        elif state is EngineState.FAILED:
            try:
                pb_utils.unload_model(self.model_name)
            except Exception:
                logger.exception("vllm_model: Triton refused to unload the model that cannot serve")

    def is_ready(self) -> bool:
        """Triton's readiness check of this model (python_backend r26.03 and later call it)."""
        return self.supervisor.serving

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            asyncio.run_coroutine_threadsafe(self._serve(request), self.loop).add_done_callback(log_failure)

    def finalize(self) -> None:
        self.health_watch.cancel()
        if self.cost_feed is not None:
            self.cost_feed.close()
        self.front_end.close()
        self.inspector.shutdown(wait=False, cancel_futures=True)
        self.supervisor.engine.shutdown()
        self.metrics.close()
        if self.vllm_metrics is not None:
            self.vllm_metrics.close()
        if self.cost_metrics is not None:
            self.cost_metrics.close()
        if self.lag_watch is not None:
            self.lag_watch.cancel()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)
        if self.run_log is not None:
            self.run_log.close()

    async def _serve(self, request: Any) -> None:
        """Answer one request; whatever happens, its last message carries the final flag.

        Above `max_pending` requests in flight it is refused before anything is read: every request
        held pins its inputs (its encoded image and video files) in the Python backend's shared memory,
        which grows to the deepest backlog and never shrinks, so an unbounded backlog is unbounded memory.
        """
        sender = request.get_response_sender()
        client_id = request.request_id()
        get = tensor_getter(pb_utils, request)
        if get(p.HEALTH) is not None:  # answered whatever the load and the engine's state
            self._answer_health(request, sender)
            return
        assessment = get(p.ASSESS)  # answered whatever the load
        generates = assessment is None
        if generates and not self.supervisor.serving:
            sender.send(
                error_response(pb_utils, client_id, self._not_serving(), code="UNAVAILABLE"), flags=FINAL
            )
            return
        if generates and self.max_pending is not None and self.pending >= self.max_pending:
            self.metrics.rejected()
            message = (
                f"vllm_model {p.OVERLOADED}: {self.pending} requests in flight, "
                f"max_pending_requests is {self.max_pending}; retry later"
            )
            sender.send(error_response(pb_utils, client_id, message, code="UNAVAILABLE"), flags=FINAL)
            return
        if generates:
            self.pending += 1
        try:
            if assessment is not None:
                self._assess(assessment, request, sender)
            else:
                await self._generate(request, sender)
        except (p.BadRequest, VLLMClientError) as error:  # the request's fault, e.g. a prompt too long
            sender.send(error_response(pb_utils, client_id, str(error), code="INVALID_ARG"), flags=FINAL)
        except EngineDeadError:
            message = f"vllm_model: the vLLM engine died while serving it; {p.RESTARTING}, retry later"
            sender.send(error_response(pb_utils, client_id, message, code="UNAVAILABLE"), flags=FINAL)
        except Exception as error:
            logger.exception("vllm_model failed on request %r", client_id)
            sender.send(error_response(pb_utils, client_id, f"vllm_model failed: {error}"), flags=FINAL)
        finally:
            if generates:
                self.pending -= 1

    def _not_serving(self) -> str:
        if self.supervisor.state is EngineState.FAILED:
            return "vllm_model cannot serve: its vLLM engine died and could not be restarted"
        return f"vllm_model {p.RESTARTING} (its vLLM engine died); retry later"

    def _answer_health(self, request: Any, sender: Any) -> None:
        """Answer a health request (`protocol.HEALTH`) with the engine's state; nothing is generated."""
        state = self.supervisor.state.value
        outputs: dict[str, Callable[[], np.ndarray | str]] = {p.ENGINE_STATE: lambda: state}
        wanted = frozenset(request.requested_output_names())
        response = pb_utils.InferenceResponse(output_tensors=requested_outputs(pb_utils, wanted, outputs))
        sender.send(response, flags=FINAL)

    def _assess(self, matrix: np.ndarray, request: Any, sender: Any) -> None:
        """Answer an assessment (`protocol.ASSESS`): how this model would class each row now, with the
        fit in service (the online one, if on); nothing is generated."""
        verdicts = self.cost_model.assess(p.parse_assessment(matrix))
        levels = np.array([v.level for v in verdicts], dtype=np.int64)
        prefill_s = np.array([v.estimate.prefill_s for v in verdicts], dtype=np.float32)
        kv_tokens = np.array([v.estimate.memory_tokens for v in verdicts], dtype=np.int64)
        outputs: dict[str, Callable[[], np.ndarray | str]] = {
            p.ASSESSED_LEVEL: lambda: levels,
            p.ASSESSED_PREFILL_S: lambda: prefill_s,
            p.ASSESSED_KV_TOKENS: lambda: kv_tokens,
            p.NUM_CLASSES: lambda: np.array([self.cost_model.num_classes], dtype=np.int64),
        }
        wanted = frozenset(request.requested_output_names())
        response = pb_utils.InferenceResponse(output_tensors=requested_outputs(pb_utils, wanted, outputs))
        sender.send(response, flags=FINAL)

    async def _generate(self, request: Any, sender: Any) -> None:
        arrival, arrival_wall = time.monotonic(), time.time()
        get = tensor_getter(pb_utils, request)
        parsed = p.parse_request(get, request.parameters())
        # The media's metadata only (decoding waits for the front end, in class order), off the loop,
        # on one thread: the tokenizer must not be used from two threads at once.
        # Through the ensemble the prompt was counted by `preprocess`: its features are checked, not
        # counted again.
        features = await asyncio.get_running_loop().run_in_executor(
            self.inspector, self.preprocessor.inspect, parsed, p.claimed_features(get)
        )
        info = decide_class(self.cost_model, self.class_source, supplied_class(get), features)
        params = sampling_params(
            dict(parsed.sampling_parameters), info, self.preprocessor.limits, parsed.sampling_source
        )
        priority = self.policy.request_priority(info.level, features.modality)
        request_id = f"{request.request_id() or 'triton'}-{uuid.uuid4().hex}"
        progress = RequestProgress(
            outputs=p.outputs_to_send(request.requested_output_names(), parsed.additional_outputs),
            additional=AdditionalOutputs(parsed.additional_outputs),
        )
        self.metrics.admitted(info.request_class)
        try:
            prompt = await self._through_front_end(parsed, info, arrival, arrival_wall, sender, progress)
            if prompt is not None:
                streaming = asyncio.ensure_future(
                    self._stream(
                        prompt, params, priority, request_id, parsed, sender, progress, info, arrival
                    )
                )
                await self._until_done_or_cancelled(streaming, sender, progress)
            if progress.cancelled:
                # A client that cancelled hears nothing more; one that did not (Triton 2.51 has flagged
                # a request on a live stream once in our test runs) hears why its stream ends.
                logger.info("request %r cancelled by Triton; aborted in the engine", request_id)
                message = "vllm_model: Triton reported the request cancelled; it was aborted"
                sender.send(
                    error_response(pb_utils, request.request_id(), message, code="CANCELLED"),
                    flags=FINAL,
                )
        finally:
            self.metrics.ended(
                info.request_class, progress.preemptions, progress.first_token, progress.cancelled
            )

    async def _through_front_end(
        self,
        parsed: p.GenerateRequest,
        info: ClassInfo,
        arrival: float,
        arrival_wall: float,
        sender: Any,
        progress: RequestProgress,
    ) -> dict[str, Any] | None:
        """The request's input for the engine, from a front-end worker: its media decoded and, under
        a class-aware policy, rendered (`engine_input`); None if the client cancelled before a worker
        took it. Rendered inputs reach the engine in the order they were rendered (the futures resolve
        in that order, and nothing awaits between a resolution and `generate`)."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[dict[str, Any]] = loop.create_future()

        def settle(result: dict[str, Any] | BaseException) -> None:
            if ready.done():
                return
            if isinstance(result, BaseException):
                ready.set_exception(result)
            else:
                ready.set_result(result)

        def work() -> None:
            started = time.monotonic()
            progress.front_end_queue_s = started - arrival

            def deliver(result: dict[str, Any] | BaseException) -> None:
                # The front end's work ends here: from now on the loop may hand the input to the engine.
                progress.front_end_work_s = time.monotonic() - started
                loop.call_soon_threadsafe(settle, result)

            try:
                prompt: dict[str, Any] = {"prompt": parsed.prompt}
                if media := self.preprocessor.decode(parsed).multi_modal_data():
                    prompt["multi_modal_data"] = media
                if self.renderer is None:  # stock vLLM renders on its own executor, in arrival order
                    deliver(prompt)
                else:
                    self.renderer.render(prompt, arrival_wall, deliver)
            except Exception as error:
                deliver(error)
            finally:
                # Every call into Triton (metrics too) stays on the loop's thread: the stub's messages to
                # the server from several threads at once crash the server.
                loop.call_soon_threadsafe(
                    self.metrics.front_end,
                    info.request_class,
                    progress.front_end_queue_s,
                    progress.front_end_work_s,
                )

        ticket = self.front_end.submit(info.level, work)
        while not (await asyncio.wait({ready}, timeout=CANCEL_POLL_S))[0]:
            if sender.is_cancelled() and ticket.withdraw():
                progress.cancelled = True
                return None
        return ready.result()

    @staticmethod
    async def _until_done_or_cancelled(
        streaming: asyncio.Future[None], sender: Any, progress: RequestProgress
    ) -> None:
        """Wait for `streaming`, checking every `CANCEL_POLL_S` whether the client cancelled."""
        while not (await asyncio.wait({streaming}, timeout=CANCEL_POLL_S))[0]:
            # Cancelling the task that iterates `generate` makes vLLM abort the request, even one
            # whose input it is still processing; `cancel` is False if the request just finished.
            if sender.is_cancelled() and streaming.cancel():
                progress.cancelled = True
                with contextlib.suppress(asyncio.CancelledError):
                    await streaming
                return
        streaming.result()

    async def _stream(
        self,
        prompt: dict[str, Any],
        params: Any,
        priority: int,
        request_id: str,
        parsed: p.GenerateRequest,
        sender: Any,
        progress: RequestProgress,
        info: ClassInfo,
        arrival: float,
    ) -> None:
        # Closing the generator early makes vLLM abort the request.
        progress.submitted = time.monotonic()
        generation = self.engine.generate(prompt, params, request_id, priority=priority)
        async with contextlib.aclosing(generation) as outputs:
            async for output in outputs:
                self._record(output, progress, info, arrival, parsed)
                if not parsed.stream:
                    continue
                # A stream is checked at every output, as NVIDIA's vLLM backend does: the check costs
                # a round trip like the send beside it, and stops the engine a step after the client.
                if sender.is_cancelled():
                    progress.cancelled = True
                    return
                response = progress.response(pb_utils, progress.unsent(), info)
                sender.send(response, flags=FINAL if output.finished else 0)
        if not parsed.stream:
            text = progress.text if parsed.exclude_input_in_output else parsed.prompt + progress.text
            sender.send(progress.response(pb_utils, text, info), flags=FINAL)

    def _record(
        self,
        output: Any,
        progress: RequestProgress,
        info: ClassInfo,
        arrival: float,
        parsed: p.GenerateRequest,
    ) -> None:
        if progress.record(output):
            self.metrics.first_token(info.request_class, time.monotonic() - arrival)
            if self.run_log is not None:
                # Its media inputs tell its own vision encoder from another's in the step that ran it.
                media_inputs = len(parsed.images) + (parsed.video is not None)
                stages = progress.stages(output, arrival)
                self.run_log.write("request", level=info.level, media_inputs=media_inputs, **stages)
