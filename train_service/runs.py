"""Owns the side effects of a run: task lists, the iteration's dataset file, training, evaluation.

The pure state machine (``core.domain.runs``) says WHAT happens next; :class:`RunEffects` does the
I/O behind it for the train service:

* ``task_ids`` / ``eval_task_ids``: the tasks of ``RunConfig.tasks`` or the environment's split
  (cut to ``max_tasks``); evaluation tasks likewise from ``eval_tasks`` / ``eval_split``.
* ``write_dataset``: the iteration's samples read from the store's ``samples`` read model, mixed by
  ``core.domain.datasets.build_dataset`` and written as ``<home>/runs/<run>/datasets/iter-<i>.jsonl``
  + ``.manifest.json`` (``train_service.run_datasets.RunDatasets``, which ``RunEffects`` extends).
* ``train``: the iteration's learner (``RunConfig.train_method(i)``: ``train.method``, a string or
  one method per iteration) on its dataset (SFT's above, or ``train_service.methods``' pairs /
  transitions), from the iteration's model folder, or from ``train.model_path`` when that model is a
  served URL (``RunConfig.train_weights``; the checkpoint folder then serves later iterations);
  inline (embedded mode: ``run_train_iteration`` in a thread) or as the Celery task on the
  ``train`` queue (with Redis), waited for: a job whose trainer stopped holding its lease is queued
  again (``train_service.train_jobs``), a job of a run that ended is stopped, and the wait is bounded
  by ``AGENTR_TRAIN_TIMEOUT_S``; returns ``ModelTrained`` or ``TrainingFailed`` (bad input:
  empty dataset, missing general-data file, bad template, ...; ``ModelTrained.metrics["method"]``
  names the learner), or ``IterationDatasetEmpty`` when a DPO / offline ArCHer iteration finds no
  pair or transition in the log (decided like an empty SFT dataset: iteration 0 fails the run, a
  later one ends it early, completed). Transient errors raise (retried).
* ``evaluate``: ``train_service.evaluation`` on the held-out tasks (stratified, seeded episodes),
  with the recovery test on the STARTING model's failed held-out episodes truncated at seeded
  random steps (built in iteration 0, the same prefixes for every model) and the iteration's mean
  revision length; and (``seen_tasks``) on the run's search tasks, stored under ``metrics["seen"]``
  (the starting model's under ``metrics["start"]["seen"]``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from core.domain.config import RunConfig, is_served_model
from core.domain.datasets import DatasetError, EmptyDatasetError
from core.domain.egress import Egress
from core.domain.events import IterationDatasetEmpty, IterationEvaluated, ModelTrained, TrainingFailed
from core.domain.ids import derived_id
from core.domain.runs import EvaluateModel, RunState, TrainModel
from core.envs.base import Env, EnvError
from core.envs.registry import egress_checked as checked_env_opener
from core.llm.ports import Policy, PolicyError
from core.llm.registry import egress_checked as checked_policy_opener
from core.runtime.settings import Settings
from core.store.ports import EventStore
from train_service.episode_processes import EpisodeWorkers, resolve_workers
from train_service.evaluation import (
    EvalConfig,
    evaluate,
    held_out_tasks,
    recorded_recovery_set,
    revision_lengths,
)
from train_service.launcher import LaunchFailed
from train_service.run_datasets import BadTrainingInput, RunDatasets

__all__ = ["BadTrainingInput", "EvalProgress", "RunEffects", "TrainProgress", "select_tasks"]

log = logging.getLogger(__name__)

TrainProgress = Callable[[int, int, float | None], None]  # (step, max_steps, loss)
EvalProgress = Callable[[str, int, int], None]  # (model label, finished episodes, total)


def _open_env(uri: str, egress: Egress | None = None) -> Env:
    from core.envs.registry import open_env

    return open_env(uri, egress=egress)


def _open_policy(ref: str, egress: Egress | None = None) -> Policy:
    from core.llm.registry import open_policy

    return open_policy(ref, egress=egress)


def _task_state(result: Any) -> str:
    return str(result.state)  # a read from the result backend


def select_tasks(env: Env, explicit: tuple[str, ...], split: str, cap: int | None) -> list[str]:
    ids = list(explicit) if explicit else list(env.task_ids(split))
    if cap is not None:
        ids = ids[:cap]
    return ids


class RunEffects(RunDatasets):
    def __init__(
        self,
        settings: Settings,
        store: EventStore,
        *,
        env_opener: Callable[[str], Env] = _open_env,
        policy_opener: Callable[[str], Policy] = _open_policy,
        inline_training: bool | None = None,
        on_train_step: TrainProgress | None = None,
        on_eval: EvalProgress | None = None,
        before_training: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        """``before_training``: awaited before each training of this process (inline training: an
        embedded run closes the models its search and critic no longer use, core.llm.policy_cache)."""
        self.settings = settings
        self.store = store
        # the registry's own openers: a local model's episodes may be played in worker processes
        self._registry_openers = env_opener is _open_env and policy_opener is _open_policy
        # behind the operator's allow-lists (core/domain/egress.py): refused before anything is called
        self.egress = egress = settings.egress
        if env_opener is _open_env:
            env_opener = functools.partial(_open_env, egress=egress)
        if policy_opener is _open_policy:
            policy_opener = functools.partial(_open_policy, egress=egress)
        self.env_opener = checked_env_opener(env_opener, egress)
        self.policy_opener = checked_policy_opener(policy_opener, egress)
        self.inline_training = settings.embedded if inline_training is None else inline_training
        self.on_train_step = on_train_step
        self.on_eval = on_eval
        self.before_training = before_training
        self._celery: Any = None
        self._jobs: Any = None

    def check_egress(self, config: RunConfig) -> None:
        """Refuse a run whose served model or remote environment is outside the operator's allow-lists
        (a RunRequested from an older API): PolicyError / EnvError naming the setting."""
        if is_served_model(config.model):
            refused = self.egress.model_problem(config.model)
            if refused is not None:
                raise PolicyError(refused)
        refused = self.egress.env_problem(config.env)
        if refused is not None:
            raise EnvError(refused)

    # ---------------------------------------------------------------------------- tasks
    async def task_ids(self, config: RunConfig) -> list[str]:
        env = self.env_opener(config.env)
        try:
            return select_tasks(env, config.tasks, config.split, config.max_tasks)
        finally:
            await env.close()

    async def eval_task_ids(self, config: RunConfig) -> list[str]:
        """Held-out tasks: ``eval_tasks`` or ``eval_split``, capped by a stratified choice
        (``train_service.evaluation.held_out_tasks``; ``evaluation.stratify = false``: the first ones)."""
        stratify = EvalConfig.from_data(config.evaluation).stratify
        env = self.env_opener(config.env)
        try:
            ids = select_tasks(env, config.eval_tasks, config.eval_split, None)
            return held_out_tasks(env, ids, config.max_eval_tasks, stratify)
        finally:
            await env.close()

    async def seen_task_ids(self, config: RunConfig, cfg: EvalConfig) -> list[str]:
        """The searched tasks evaluated as SEEN ones: all, or ``cfg.seen_max_tasks`` of them
        (stratified like the held-out ones); none when ``cfg.seen_tasks`` is off."""
        if not cfg.seen_tasks:
            return []
        searched = await self.task_ids(config)
        if cfg.seen_max_tasks is None:
            return searched
        env = self.env_opener(config.env)
        try:
            return held_out_tasks(env, searched, cfg.seen_max_tasks, cfg.stratify)
        finally:
            await env.close()

    # ---------------------------------------------------------------------------- training
    def _celery_app(self) -> Any:
        if self._celery is None:
            from train_service.celery_app import make_celery

            self._celery = make_celery(self.settings)
        return self._celery

    async def train(
        self, state: RunState, effect: TrainModel
    ) -> ModelTrained | TrainingFailed | IterationDatasetEmpty:
        run_id, iteration = state.run_id, effect.iteration
        try:
            # a served URL model trains from train.model_path (its local weights); folders train as-is
            weights = state.config.train_weights(effect.model_ref)
        except ValueError as exc:
            return TrainingFailed(run_id, iteration, str(exc))
        method = state.config.train_method(iteration)  # train.method may be one per iteration
        online = state.config.learns_online(iteration)
        try:
            if online:  # online ArCHer plays for its data: no dataset file (its episodes are logged)
                dataset_path, summary = Path(""), {"online": True}
            elif method == "sft":
                dataset_path, summary = await self.write_dataset(state, iteration, effect.dataset_id)
            else:  # dpo / archer: pairs or transitions from the log (train_service.methods)
                from train_service.methods import write_method_dataset

                dataset_path, summary = await write_method_dataset(
                    self.store,
                    self.run_dir(run_id) / "datasets",
                    run_id,
                    iteration,
                    method,
                    state.config.transition_settings(),
                )
        except BadTrainingInput as exc:
            return TrainingFailed(run_id, iteration, str(exc))
        except EmptyDatasetError as exc:
            # the learner's own data is empty (DPO: no preference pair; ArCHer: no transition): the
            # outcome of an empty SFT dataset (core.domain.runs): iteration 0 fails the run, a later
            # one ends it early, completed, with the model that searched it
            return IterationDatasetEmpty(run_id, iteration, f"train.method {method}: {exc}")
        except DatasetError as exc:
            return TrainingFailed(run_id, iteration, f"train.method {method}: {exc}")
        out_dir = self.run_dir(run_id) / "checkpoints" / f"iter-{iteration}"
        kwargs: dict[str, Any] = {
            "run_id": run_id,
            "iteration": iteration,
            "dataset_id": effect.dataset_id,
            "dataset_path": str(dataset_path),
            "model_path": weights,
            "out_dir": str(out_dir),
            "config": state.config.sft_overrides(iteration),
            "launch": state.config.launch_settings(),
            "method": method,
        }
        if online:
            # online ArCHer plays the run's training tasks and logs its episodes (archer_online)
            kwargs["online"] = {
                "env_uri": state.config.env,
                "task_ids": await self.task_ids(state.config),
                "store_url": self.settings.effective_database_url,
                "project_id": state.project_id or None,
            }
        log.info(
            "run %s iteration %d: training %s (model %s) on %s",
            run_id,
            iteration,
            weights,
            effect.model_ref,
            dataset_path,
        )
        try:
            if self.inline_training:
                from train_service.celery_app import run_train_iteration

                if self.before_training is not None:
                    await self.before_training()
                result = await asyncio.to_thread(run_train_iteration, on_step=self.on_train_step, **kwargs)
            else:
                result = await self._train_with_celery(kwargs)
        except BadTrainingInput as exc:
            return TrainingFailed(run_id, iteration, str(exc))
        except LaunchFailed as exc:  # a torchrun child failed: its last lines are in the message
            return TrainingFailed(run_id, iteration, str(exc))
        except (ValueError, FileNotFoundError, OSError) as exc:
            # bad input (empty dataset, unknown SFT field, missing model folder, bad template)
            from train_service.celery_app import TransientTrainingError

            if isinstance(exc, TransientTrainingError):
                raise
            return TrainingFailed(run_id, iteration, f"{type(exc).__name__}: {exc}")
        metrics = {
            "method": method,  # the iteration's learner (train.method, per iteration)
            **dict(result.get("metrics") or {}),
            "dataset": summary,
            "reused": result.get("reused", False),
        }
        return ModelTrained(run_id, iteration, effect.dataset_id, str(result["checkpoint"]), metrics)

    def _train_jobs(self) -> Any:
        if self._jobs is None:
            from train_service.train_jobs import TrainJobs

            self._jobs = TrainJobs(self.settings)
        return self._jobs

    def train_task_id(self, run_id: str, iteration: int, dataset_id: str) -> str:
        """The Celery task id of an iteration's training job (a resubmission keeps it)."""
        return derived_id("train-task", run_id, iteration, dataset_id)

    async def _run_ended(self, run_id: str) -> bool:
        from core.domain.ids import run_stream
        from core.domain.runs import fold

        history = await self.store.read_stream(run_stream(run_id))
        return fold(run_id, [r.event for r in history]).terminal

    async def stop_run_training(self, run_id: str, task_ids: Sequence[str] = ()) -> None:
        """The run ended (cancelled): its training jobs stop, queued ones never start (Celery mode;
        inline training belongs to the process that runs the whole loop)."""
        if self.inline_training:
            return
        from train_service.celery_app import cancel_training

        jobs = self._train_jobs()
        await asyncio.to_thread(jobs.cancel_run, run_id)
        for task_id in task_ids:
            await asyncio.to_thread(cancel_training, self._celery_app(), task_id, self.settings)
        log.info("run %s ended: its training jobs were told to stop", run_id)

    async def _submit(self, task_id: str, kwargs: dict[str, Any]) -> Any:
        from train_service.celery_app import submit_training

        app = self._celery_app()
        attempt = await asyncio.to_thread(self._train_jobs().count_attempt, task_id)
        log.info("run %s iteration %s: training job %s queued (attempt %d)", kwargs["run_id"],
                 kwargs["iteration"], task_id, attempt)  # fmt: skip
        return await asyncio.to_thread(lambda: submit_training(app, task_id=task_id, **kwargs))

    async def _train_with_celery(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Queue the job (unless it is known already) and wait for its result, watching that its
        trainer lives (``train_service.train_jobs``: a lost job is queued again, at most
        ``train_max_attempts`` times in all), that the run has not ended (then the job is stopped)
        and ``train_timeout_s``. Only this run's handler waits: the worker handles others meanwhile."""
        from celery import states

        settings = self.settings
        app = self._celery_app()
        jobs = self._train_jobs()
        run_id = kwargs["run_id"]
        task_id = self.train_task_id(run_id, kwargs["iteration"], kwargs["dataset_id"])
        result = app.AsyncResult(task_id)
        state = await asyncio.to_thread(_task_state, result)
        if state == states.PENDING:
            # never submitted (or unknown to the backend): submit under the derived task id; a
            # duplicate submission of a queued job trains once (its lease, then its done result)
            result = await self._submit(task_id, kwargs)
        timeout = settings.train_heartbeat_timeout_s
        poll_s = min(1.0, timeout / 10)
        started = last_run_check = time.monotonic()
        no_lease_since: float | None = None
        while True:
            state = await asyncio.to_thread(_task_state, result)
            if state in states.READY_STATES:
                break
            now = time.monotonic()
            if state == "PROGRESS":
                info = result.info
                if self.on_train_step and isinstance(info, dict):
                    self.on_train_step(
                        int(info.get("step", 0)), int(info.get("max_steps", 0)), info.get("loss")
                    )
            if now - last_run_check >= min(3.0, timeout / 3):
                last_run_check = now
                if await self._run_ended(run_id):
                    await self.stop_run_training(run_id, [task_id])
                    raise BadTrainingInput("the run ended while it trained; the training job was stopped")
            if state in (states.STARTED, "PROGRESS"):
                holder = await asyncio.to_thread(jobs.holder, task_id)
                if holder is not None:
                    no_lease_since = None
                elif no_lease_since is None:
                    no_lease_since = now
                elif now - no_lease_since >= timeout / 3:
                    # started, but no live trainer holds it: its trainer died (SIGKILL, OOM, host lost)
                    attempts = await asyncio.to_thread(jobs.attempts, task_id)
                    if attempts >= settings.train_max_attempts:
                        raise BadTrainingInput(
                            f"training job {task_id} was lost {attempts} time(s): its trainer stopped "
                            f"writing heartbeats (AGENTR_TRAIN_HEARTBEAT_TIMEOUT_S={timeout:g}) and "
                            f"AGENTR_TRAIN_MAX_ATTEMPTS={settings.train_max_attempts} is reached"
                        )
                    log.warning(
                        "run %s: training job %s lost (no trainer heartbeat); queueing it again",
                        run_id,
                        task_id,
                    )
                    await asyncio.to_thread(app.backend.forget, task_id)
                    result = await self._submit(task_id, kwargs)
                    no_lease_since = None
            if now - started > settings.train_timeout_s:
                from train_service.celery_app import cancel_training

                await asyncio.to_thread(cancel_training, app, task_id, settings)
                raise BadTrainingInput(
                    f"training job {task_id} did not finish within "
                    f"AGENTR_TRAIN_TIMEOUT_S={settings.train_timeout_s:g}s; it was cancelled"
                )
            await asyncio.sleep(poll_s)
        if state == states.SUCCESS:
            return dict(result.result)
        if state == states.REVOKED:
            raise BadTrainingInput("training was cancelled")
        raise BadTrainingInput(f"training task {task_id} ended in {state}: {result.result!r}")

    # ---------------------------------------------------------------------------- evaluation
    async def _evaluate_model(
        self,
        label: str,
        model_ref: str,
        config: RunConfig,
        tasks: list[str],
        cfg: EvalConfig,
        workers: EpisodeWorkers | None,
        **options: Any,
    ) -> dict[str, Any]:
        def progress(done: int, total: int) -> None:
            if self.on_eval:
                self.on_eval(label, done, total)

        refused = self.egress.env_problem(config.env)  # the worker processes open it by URI
        if refused is not None:
            raise EnvError(refused)
        # a local model's episodes in worker processes (the same results on more cores), else here
        player = workers.player(model_ref, config.env) if workers and self._shardable(model_ref) else None
        policy = None if player else await asyncio.to_thread(self.policy_opener, model_ref)
        try:
            return await evaluate(
                policy,
                lambda: self.env_opener(config.env),
                tasks,
                cfg,
                seed=config.seed,
                progress=progress,
                player=player,
                **options,
            )
        finally:
            if policy is not None:
                await policy.close()

    def _shardable(self, model_ref: str) -> bool:
        """Whether ``model_ref``'s episodes may be played in worker processes: a local model folder
        opened by the registry, on an environment the workers open from its URI (a test's own
        openers, or a served model, stay in this process)."""
        local = not model_ref.startswith(("http://", "https://"))
        return local and self._registry_openers

    def eval_workers(self, cfg: EvalConfig, episodes: int, model_refs: Sequence[str]) -> int:
        """Worker processes for an evaluation of ``episodes`` episodes per model
        (``evaluation.workers``; 1 = none): never under shared passes, nor when no model is local."""
        if cfg.shared_passes or cfg.workers == 1 or not any(self._shardable(m) for m in model_refs):
            return 1
        return resolve_workers(cfg.workers, episodes)

    async def evaluate(self, state: RunState, effect: EvaluateModel) -> IterationEvaluated:
        """The iteration's model on the held-out tasks (with the recovery test) and on the seen
        tasks. In iteration 0 the STARTING model is evaluated first: its failed held-out episodes,
        truncated at seeded random steps, are the recovery set (stored in iteration 0's
        ``metrics["start"]["recovery_set"]``) that every later model continues too."""
        config = state.config
        cfg = EvalConfig.from_data(config.evaluation)
        tasks = await self.eval_task_ids(config)
        seen = await self.seen_task_ids(config, cfg)
        first = state.iteration(0)
        start: dict[str, Any] | None = None
        recovery = recorded_recovery_set((first.eval_metrics or {}).get("start") if first else None)
        with_start = effect.iteration == 0 and (cfg.baseline or cfg.recovery_episodes > 0)
        refs = [effect.model_ref, *([effect.start_model_ref] if with_start else [])]
        batch = (len(tasks) + len(seen)) * cfg.episodes_per_task  # the first batch of each model
        count = self.eval_workers(cfg, batch, refs)
        async with EpisodeWorkers(count) if count > 1 else nullcontext() as workers:
            if with_start:
                # held-out and seen episodes in the same batches (train_service.evaluation)
                start = await self._evaluate_model(
                    "starting model",
                    effect.start_model_ref,
                    config,
                    tasks,
                    cfg,
                    workers,
                    seen=seen if cfg.baseline else (),
                    build_recovery_set=cfg.recovery_episodes > 0,
                )
                recovery = recorded_recovery_set(start)
            metrics = await self._evaluate_model(
                f"iteration {effect.iteration}",
                effect.model_ref,
                config,
                tasks,
                cfg,
                workers,
                seen=seen,
                recovery=recovery or (),
            )
        lengths = await revision_lengths(self.store, state.run_id)
        metrics["revision_length_mean"] = lengths.get(effect.iteration)
        if start is not None:
            metrics["start"] = start
        return IterationEvaluated(state.run_id, effect.iteration, effect.model_ref, metrics)
