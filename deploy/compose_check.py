"""The Docker Compose deployment, run for real (``deploy/compose-check``; README "Docker Compose").

Owns the end-to-end check of ``docker-compose.yml`` and the ``Dockerfile`` on a Docker engine: it
makes sure an engine and the Compose v2 plugin are there (Debian's ``docker.io``, started with
``dockerd --iptables=false``; the ``docker-compose`` package of Debian's newer suite), builds the
images, brings the stack up under its own compose project, walks the README's compose flow through
the published API port, disturbs it the way production does, and takes it down with its volumes.

Steps (one ``PASS`` / ``FAIL`` line each, with its time):

* engine, compose plugin: found, or installed and started;
* base images: ``python:3.11-slim``, ``postgres:16-alpine``, ``redis:7-alpine`` pulled; where Docker
  Hub cannot be reached, stand-ins built from Debian packages (``deploy/standins/``: test scaffolding,
  swapped in by ``deploy/standins/compose.standins.yml``, which changes only image names);
* torch index: where download.pytorch.org cannot be reached, a local wheel index on 127.0.0.1 serving
  the CPU torch wheel pip finds on this machine (``--build-arg TORCH_INDEX_BASE``, no Dockerfile edit);
* images ``agentr:base`` and ``agentr:ml`` built from the Dockerfile's targets;
* up: every service healthy and ``migrate`` exited 0; ``migrate`` again is harmless;
* a warm-started tiny model in ``/data/models`` (what ``agentr run --quick`` starts from);
* the README's flow: a project and a key with the admin key, a quick TextCraft run submitted over
  HTTP that completes (search, model critic, splice, SFT on the Celery trainer, evaluation), its
  dataset downloaded; a failed and a successful trace of one task become a revision sample, and a
  trace dataset is built and downloaded;
* ``--scale search=2``; the same run again with a search replica ``docker kill``ed mid-search: the
  dataset is the undisturbed run's (same samples, no duplicate ids) and every event type of the run
  counted the same; then the trainer ``docker kill``ed mid-job and started again: the run completes
  within 10 minutes of the kill, trained once;
* a run cancelled while it trains: its training stops within 30 s (the Celery job ends REVOKED and
  its step counter stops), the run stays cancelled and records no model;
* ``down -v``: containers, network and volumes gone.

Timeouts are short where the deployment lets them be set (``AGENTR_RECLAIM_IDLE_MS``, passed through
the environment as a user's ``.env`` would); nothing else differs from the files a user runs. By
default everything is built fresh and the images are removed at the end (nothing is cached between
runs); ``--reuse`` keeps the engine, images and layer cache for the next call while developing.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

try:
    import httpx
except ImportError:  # pragma: no cover - a message, not a traceback
    sys.exit("deploy/compose-check needs httpx: run it with the project's virtualenv (.venv/bin/python)")

ROOT = Path(__file__).resolve().parents[1]
STANDINS = ROOT / "deploy" / "standins"
PROJECT = "agentr-check"
SERVICES = ("postgres", "redis", "api", "relay", "search", "critic", "splice", "train", "trainer")
STANDIN_LABEL = "org.agentr.standin"
ROOT_IMAGE = "agentr-standin/bookworm:minbase"
# official image -> (stand-in Dockerfile, the tag the stand-in gets). The Dockerfile's FROM names
# python:3.11-slim, so that stand-in carries the official name (removed again at the end); the
# PostgreSQL and Redis stand-ins keep names of their own and compose.standins.yml points at them.
BASE_IMAGES = {
    "python:3.11-slim": ("python.Dockerfile", "python:3.11-slim"),
    "postgres:16-alpine": ("postgres.Dockerfile", "agentr-standin/postgres:16"),
    "redis:7-alpine": ("redis.Dockerfile", "agentr-standin/redis:7"),
}
TORCH_VERSION = "2.13.0"
COMPOSE_SUITE = "trixie"  # Debian's suite whose docker-compose package is Compose v2
PLUGIN_DIR = Path("/usr/local/lib/docker/cli-plugins")
KILL_DEADLINE_S = 600  # a run whose trainer was killed completes within this much of the kill
CANCEL_DEADLINE_S = 30  # a cancelled run's training stops within this
# short timeouts a user could set in .env, so a killed worker's messages come back quickly
CHECK_SETTINGS = {
    "AGENTR_RECLAIM_IDLE_MS": "10000",
    "AGENTR_TRAIN_HEARTBEAT_TIMEOUT_S": "30",
    "AGENTR_LOG_LEVEL": "INFO",
}
TRACE_TASK = "compose-check-refund"

T = TypeVar("T")


class CheckFailed(Exception):
    """A step's assertion failed; the message says what was expected and what was found."""


class Abort(Exception):
    """A step the rest depends on failed: the remaining steps are skipped."""


def expect(condition: object, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


# ---------------------------------------------------------------------------------------------------
# output: one line per step


@dataclass
class Steps:
    """Runs named steps, prints one PASS / FAIL / SKIP line per step with its time, and remembers
    the results for the summary and the exit status."""

    started: float = field(default_factory=time.monotonic)
    results: list[tuple[str, str, float, str]] = field(default_factory=list)
    aborted: str | None = None

    @contextlib.contextmanager
    def step(self, name: str, critical: bool = False) -> Iterator[dict[str, str]]:
        """``critical``: the steps after it need it, so its failure aborts them."""
        if self.aborted is not None:
            raise Abort(self.aborted)
        info: dict[str, str] = {}
        t0 = time.monotonic()
        print(f"---- [{self.elapsed():6.0f}s] {name} ...", flush=True)
        try:
            yield info
        except (
            CheckFailed,
            subprocess.CalledProcessError,
            subprocess.TimeoutExpired,
            httpx.HTTPError,
        ) as exc:
            self._line("FAIL", name, time.monotonic() - t0, describe(exc))
            if critical:
                self.aborted = name
        except Exception as exc:
            self._line("FAIL", name, time.monotonic() - t0, f"{type(exc).__name__}: {describe(exc)}")
            if critical:
                self.aborted = name
        else:
            self._line("PASS", name, time.monotonic() - t0, info.get("detail", ""))

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _line(self, status: str, name: str, seconds: float, detail: str) -> None:
        self.results.append((status, name, seconds, detail))
        tail = f": {detail}" if detail else ""
        print(f"{status} {name} ({seconds:.1f} s){tail}", flush=True)

    def summary(self) -> int:
        print(f"\n==== compose check: {self.elapsed():.0f} s", flush=True)
        for status, name, seconds, _detail in self.results:
            print(f"  {status:4} {seconds:7.1f} s  {name}")
        failed = [name for status, name, _s, _d in self.results if status != "PASS"]
        verdict = "FAIL" if failed else "PASS"
        print(f"{verdict} compose check ({len(self.results) - len(failed)}/{len(self.results)} steps passed)")
        return 1 if failed else 0


def describe(exc: BaseException) -> str:
    if isinstance(exc, subprocess.CalledProcessError):
        out = (exc.stdout or "") + (exc.stderr or "") if isinstance(exc.stdout, str | None) else ""
        return f"`{' '.join(map(str, exc.cmd))[:200]}` exited {exc.returncode}\n{tail(out, 30)}"
    return str(exc)


def tail(text: str, lines: int) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# ---------------------------------------------------------------------------------------------------
# processes


@dataclass
class Shell:
    """Runs commands, their output appended to ``log`` (the full record); raises on failure."""

    log: Path
    env: dict[str, str]

    def run(
        self,
        args: list[str | Path],
        *,
        timeout: float = 600,
        check: bool = True,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        nice: bool = False,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        argv = (["nice", "-n", "5"] if nice else []) + [str(a) for a in args]
        with self.log.open("a") as log:
            log.write(f"\n$ {' '.join(argv)}\n")
        done = subprocess.run(
            argv,
            env={**self.env, **(env or {})},
            cwd=cwd or ROOT,
            input=input_text,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input_text is not None else subprocess.DEVNULL,
        )
        with self.log.open("a") as log:
            log.write(done.stdout)
            log.write(done.stderr)
            log.write(f"[exit {done.returncode}]\n")
        if check and done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, argv, done.stdout, done.stderr)
        return done

    def ok(self, args: list[str | Path], timeout: float = 60) -> bool:
        try:
            return self.run(args, timeout=timeout, check=False).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, poll_s: float = 2.0) -> T:
    """``probe()``'s first truthy answer, polled until ``timeout`` s; CheckFailed naming ``what``."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            value = probe()
            if value:
                return value
        except (httpx.HTTPError, subprocess.CalledProcessError, ValueError, KeyError) as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise CheckFailed(
                f"timed out after {timeout:.0f} s waiting for {what}" + (f" ({last})" if last else "")
            )
        time.sleep(poll_s)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def reachable(url: str, timeout: float = 10) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return True
    except Exception:
        return False


# ---------------------------------------------------------------------------------------------------
# engine and plugin


def apt_install(sh: Shell, *packages: str) -> None:
    sh.run(["apt-get", "update", "-q"], timeout=600)
    sh.run(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
        env={"DEBIAN_FRONTEND": "noninteractive"},
        timeout=900,
    )


def ensure_engine(sh: Shell, work: Path) -> tuple[str, subprocess.Popen[bytes] | None]:
    """A Docker engine that answers: the one running, or Debian's docker.io started here."""
    if shutil.which("docker") and sh.ok(["docker", "info"], timeout=30):
        return "an engine was already running", None
    if os.geteuid() != 0:
        raise CheckFailed("no Docker engine answers, and starting one needs root")
    if not shutil.which("dockerd") or not shutil.which("docker"):
        apt_install(sh, "docker.io")
    shares = container_cpu_shares()
    log = (work / "dockerd.log").open("ab")
    # --iptables=false: the host's firewall is left alone; containers on compose's bridge network
    # still reach each other by service name (builds use the host network for package indexes).
    daemon = subprocess.Popen(
        ["dockerd", "--iptables=false"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    wait_for("dockerd to answer", lambda: sh.ok(["docker", "info"], timeout=10) or None, 90, 1.0)
    version = sh.run(["docker", "version", "--format", "{{.Server.Version}}"]).stdout.strip()
    return f"started dockerd {version} (pid {daemon.pid}, --iptables=false){shares}", daemon


# the CFS weight of one process at nice 5 (the kernel's sched_prio_to_weight), and how many
# containers run at once at most (the services, a second search replica, the one-off model maker)
NICE_5_WEIGHT = 335
CONTAINERS_AT_ONCE = len(SERVICES) + 2
CGROUP_V1_DOCKER = Path("/sys/fs/cgroup/cpu/docker")


def container_cpu_shares() -> str:
    """On cgroup v1, give the ``docker`` cpu cgroup (where dockerd's cgroupfs driver puts every
    container) the weight of its containers as processes at nice 5, before dockerd makes it with
    the default 1024. Otherwise the whole stack weighs as ONE nice-0 process against every other
    process on the host, ``nice`` has no effect inside it, and on a busy shared machine (2 cores,
    load 30) each worker's healthcheck took 55 s and all of them turned unhealthy. ' (...)' for the
    step's detail, '' where nothing was set (cgroup v2, or the folder is not writable)."""
    if not CGROUP_V1_DOCKER.parent.is_dir():
        return ""
    shares = NICE_5_WEIGHT * CONTAINERS_AT_ONCE
    try:
        CGROUP_V1_DOCKER.mkdir(exist_ok=True)
        (CGROUP_V1_DOCKER / "cpu.shares").write_text(f"{shares}\n")
    except OSError:
        return ""
    return f" (cgroup v1: containers' cpu.shares {shares}, {CONTAINERS_AT_ONCE} processes at nice 5)"


def ensure_compose_plugin(sh: Shell, work: Path) -> str:
    """``docker compose`` (v2): present, or Debian's docker-compose package of its newer suite
    unpacked into the CLI plugin folder."""
    found = sh.run(["docker", "compose", "version", "--short"], check=False)
    if found.returncode == 0:
        return f"Compose {found.stdout.strip()} found"
    if os.geteuid() != 0:
        raise CheckFailed("`docker compose` is missing, and installing it needs root")
    apt_dir = work / "apt"
    (apt_dir / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (apt_dir / "sources.list").write_text(f"deb http://deb.debian.org/debian {COMPOSE_SUITE} main\n")
    opts = [
        "-o", f"Dir::Etc::SourceList={apt_dir / 'sources.list'}",
        "-o", "Dir::Etc::SourceParts=/dev/null",
        "-o", f"Dir::State::Lists={apt_dir / 'lists'}",
        "-o", f"Dir::Cache={apt_dir / 'cache'}",
        "-o", "APT::Sandbox::User=root",
    ]  # fmt: skip
    sh.run(["apt-get", *opts, "update", "-q"], timeout=300)
    sh.run(["apt-get", *opts, "download", "docker-compose"], cwd=apt_dir, timeout=300)
    deb = next(apt_dir.glob("docker-compose_*.deb"))
    unpacked = apt_dir / "unpacked"
    sh.run(["dpkg-deb", "-x", deb, unpacked])
    PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
    target = PLUGIN_DIR / "docker-compose"
    shutil.copy2(unpacked / "usr/libexec/docker/cli-plugins/docker-compose", target)
    target.chmod(0o755)
    version = sh.run(["docker", "compose", "version", "--short"]).stdout.strip()
    return f"installed Compose {version} from Debian {COMPOSE_SUITE} ({deb.name}) into {PLUGIN_DIR}"


# ---------------------------------------------------------------------------------------------------
# images


def image_labels(sh: Shell, image: str) -> dict[str, str] | None:
    """The image's labels, or None when there is no such image."""
    done = sh.run(["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", image], check=False)
    if done.returncode != 0:
        return None
    return json.loads(done.stdout.strip() or "null") or {}


def remove_images(sh: Shell) -> list[str]:
    """Remove this check's images: agentr:base / agentr:ml and every stand-in (the ``python:3.11-slim``
    tag only when it is a stand-in). Their untagged parent layers go with them: no cache is left."""
    gone = []
    names = ["agentr:base", "agentr:ml", *(tag for _f, tag in BASE_IMAGES.values()), ROOT_IMAGE]
    for name in names:
        labels = image_labels(sh, name)
        if labels is None:
            continue
        if name in BASE_IMAGES and STANDIN_LABEL not in labels:
            continue  # the real image: not ours to remove
        sh.run(["docker", "image", "rm", "--force", name], check=False)
        gone.append(name)
    return gone


def debootstrap_root(sh: Shell, work: Path) -> None:
    """``agentr-standin/bookworm:minbase``: a Debian bookworm minbase root imported as an image."""
    if not shutil.which("debootstrap"):
        apt_install(sh, "debootstrap")
    root = work / "bookworm-root"
    sh.run(
        ["debootstrap", "--variant=minbase", "bookworm", root, "http://deb.debian.org/debian"],
        timeout=900,
        nice=True,
    )
    # tar -C ROOT -c . | docker import - NAME
    with subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE) as tar:
        imported = subprocess.run(
            ["docker", "import", "--change", f"LABEL {STANDIN_LABEL}=root", "-", ROOT_IMAGE],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
            timeout=600,
        )
    if tar.returncode != 0 or imported.returncode != 0:
        raise CheckFailed(f"importing the bookworm root failed: {imported.stderr.strip()}")
    shutil.rmtree(root)


def build_standin(sh: Shell, context: Path, dockerfile: str, tag: str) -> None:
    sh.run(
        ["docker", "build", "--network", "host", "--label", f"{STANDIN_LABEL}={dockerfile}",
         "--build-arg", f"ROOT_IMAGE={ROOT_IMAGE}", "-f", context / dockerfile, "-t", tag, context],
        env={"DOCKER_BUILDKIT": "0"},
        timeout=900,
        nice=True,
    )  # fmt: skip


def standin_context(work: Path) -> Path:
    """deploy/standins plus the host's CA bundle (python.Dockerfile trusts what the host trusts)."""
    context = work / "standins"
    shutil.rmtree(context, ignore_errors=True)
    shutil.copytree(STANDINS, context)
    bundle = Path(ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
    expect(bundle.is_file(), f"no CA bundle at {bundle} to give the Python stand-in")
    shutil.copy(bundle, context / "host-ca-certificates.crt")
    return context


def base_images(sh: Shell, work: Path, reuse: bool) -> tuple[bool, str]:
    """(stand-ins used, detail): the three base images, pulled, or stood in for from Debian."""
    pulled = sh.run(["docker", "pull", "-q", "redis:7-alpine"], check=False, timeout=120)
    if pulled.returncode == 0:
        for image in ("python:3.11-slim", "postgres:16-alpine"):
            sh.run(["docker", "pull", "-q", image], timeout=600)
        return False, "pulled from Docker Hub"
    reason = tail(pulled.stderr, 1).removeprefix("Error response from daemon: ")[:120]
    todo = []
    for dockerfile, tag in BASE_IMAGES.values():
        labels = image_labels(sh, tag)
        if labels is not None and (STANDIN_LABEL not in labels or reuse):
            continue  # the official image is here already, or a stand-in kept by --reuse
        todo.append((dockerfile, tag))
    if todo and (image_labels(sh, ROOT_IMAGE) is None or not reuse):
        debootstrap_root(sh, work)
    # python, postgres and redis at once: mostly package downloads and unpacking
    context = standin_context(work)
    threads, errors = [], []
    for dockerfile, tag in todo:

        def build(dockerfile: str = dockerfile, tag: str = tag) -> None:
            try:
                build_standin(sh, context, dockerfile, tag)
            except Exception as exc:
                errors.append(f"{tag}: {describe(exc)}")

        threads.append(threading.Thread(target=build))
        threads[-1].start()
    for thread in threads:
        thread.join()
    if errors:
        raise CheckFailed("stand-in build failed: " + "\n".join(errors))
    built = ", ".join(tag for _d, tag in todo) or "none (kept by --reuse)"
    return True, f"Docker Hub unreachable ({reason}): stand-ins built from Debian packages: {built}"


class WheelIndex:
    """A PEP 503 simple index on 127.0.0.1 at ``/cpu/<project>/`` holding the CPU torch wheel this
    machine's pip finds (its local wheels / index) and torch's dependencies, for the ``ml`` stage's
    ``pip install --index-url ${TORCH_INDEX_BASE}/cpu torch==VERSION``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.server: http.server.ThreadingHTTPServer | None = None

    def fill(self, sh: Shell) -> int:
        wheels = self.folder / "wheels"
        sh.run(
            [sys.executable, "-m", "pip", "download", "-q", f"torch=={TORCH_VERSION}", "-d", wheels],
            timeout=900,
        )
        torch = list(wheels.glob(f"torch-{TORCH_VERSION}*.whl"))
        expect(torch, f"pip download found no torch {TORCH_VERSION} wheel")
        for wheel in wheels.glob("*.whl"):
            project = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
            (self.folder / "cpu" / project).mkdir(parents=True, exist_ok=True)
            shutil.move(str(wheel), self.folder / "cpu" / project / wheel.name)
        return sum(1 for _ in self.folder.glob("cpu/*/*.whl"))

    def start(self, port: int = 0) -> str:
        """Serve on ``port`` (0: any free one)."""
        handler = functools.partial(_QuietHandler, directory=str(self.folder))
        try:
            self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
        except OSError:
            self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


def build_agentr_images(sh: Shell, torch_index: str | None, legacy_builder: bool) -> str:
    """agentr:base and agentr:ml from the Dockerfile's targets, as docker-compose.yml names them.
    The host network: package indexes are reached with the engine's iptables left off. The legacy
    builder where BuildKit's Dockerfile frontend (docker/dockerfile:1.7) cannot be pulled."""
    env = {"DOCKER_BUILDKIT": "0"} if legacy_builder else {}
    times = []
    for target in ("base", "ml"):
        args = ["docker", "build", "--network", "host", "--target", target, "-t", f"agentr:{target}"]
        if target == "ml" and torch_index:
            args += ["--build-arg", f"TORCH_INDEX_BASE={torch_index}"]
        t0 = time.monotonic()
        sh.run([*args, "."], env=env, timeout=1500, nice=True)
        times.append(f"agentr:{target} {time.monotonic() - t0:.0f} s")
    sizes = sh.run(
        ["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}} {{.Size}}", "agentr"]
    ).stdout
    return "; ".join(times) + " (" + ", ".join(sizes.split("\n")[:2]).strip(", ") + ")"


# ---------------------------------------------------------------------------------------------------
# the deployment


@dataclass
class Deployment:
    """The stack under compose project ``agentr-check``: the project's docker-compose.yml, plus the
    stand-ins' image names when they are used; settings from an env file written here."""

    sh: Shell
    files: list[Path]
    env_file: Path
    port: int
    admin_key: str

    def compose(
        self, *args: str, timeout: float = 600, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        cmd = [
            "docker",
            "compose",
            "-p",
            PROJECT,
            "--project-directory",
            str(ROOT),
            "--env-file",
            str(self.env_file),
        ]
        for f in self.files:
            cmd += ["-f", str(f)]
        return self.sh.run([*cmd, *args], timeout=timeout, check=check)

    def containers(self) -> list[dict[str, Any]]:
        out = self.compose("ps", "-a", "--format", "json").stdout.strip()
        if not out:
            return []
        if out.startswith("["):  # older Compose: one array
            found = list(json.loads(out))
        else:
            found = [json.loads(line) for line in out.splitlines() if line.strip()]
        # the services' own containers, not one-off `compose run` ones (the model is made in one)
        return [c for c in found if "com.docker.compose.oneoff=True" not in c.get("Labels", "")]

    def container_ids(self, service: str) -> list[str]:
        return [c["ID"] for c in self.containers() if c["Service"] == service and c["State"] == "running"]

    def healthy(self, counts: dict[str, int]) -> str | None:
        """None while any service is not up as expected (``counts``: replicas per service);
        otherwise a summary."""
        by: dict[str, list[dict[str, Any]]] = {}
        for c in self.containers():
            by.setdefault(c["Service"], []).append(c)
        migrate = by.get("migrate", [])
        if not migrate or migrate[0]["State"] != "exited":
            return None
        if migrate[0].get("ExitCode") != 0:
            raise CheckFailed(f"migrate exited {migrate[0].get('ExitCode')}:\n{self.logs('migrate', 20)}")
        for service, n in counts.items():
            up = [c for c in by.get(service, []) if c["State"] == "running" and c.get("Health") == "healthy"]
            if len(up) != n:
                return None
        return ", ".join(f"{s}x{n}" if n > 1 else s for s, n in counts.items())

    def wait_healthy(self, counts: dict[str, int], timeout: float) -> str:
        """``healthy(counts)``'s summary once it has one; CheckFailed naming every container's
        state when ``timeout`` s pass first."""
        try:
            return wait_for("every service to be healthy", lambda: self.healthy(counts), timeout)
        except CheckFailed as exc:
            containers = self.containers()
            states = ", ".join(
                f"{c['Service']} {c['State']}{' ' + c['Health'] if c.get('Health') else ''}"
                for c in containers
            )
            why = [
                f"{c['Service']} ({c['ID'][:12]}): {self.last_health_check(c['ID'])}"
                for c in containers
                if c.get("Health") not in (None, "", "healthy")
            ]
            raise CheckFailed(f"{exc}: {states}" + "".join(f"\n  {w}" for w in why)) from None

    def last_health_check(self, container: str) -> str:
        """The last healthcheck's exit code and output, as Docker recorded them."""
        done = self.sh.run(
            ["docker", "inspect", "--format", "{{json .State.Health.Log}}", container], check=False
        )
        try:
            last = (json.loads(done.stdout) or [{}])[-1]
        except ValueError:
            return done.stderr.strip()[:200]
        output = " ".join(str(last.get("Output", "")).split())[:300]
        return f"exit {last.get('ExitCode')}: {output}"

    def logs(self, service: str, lines: int = 200) -> str:
        done = self.compose("logs", "--no-color", "--tail", str(lines), service, check=False)
        return done.stdout + done.stderr

    def psql(self, sql: str) -> list[list[str]]:
        """Rows of ``sql`` run by psql in the postgres container (tab-separated, no header)."""
        out = self.compose(
            "exec", "-T", "postgres", "sh", "-c",
            'psql -v ON_ERROR_STOP=1 -At -F "\t" -U "$POSTGRES_USER" -d "$POSTGRES_DB" -c "$0"', sql,
        ).stdout  # fmt: skip
        return [line.split("\t") for line in out.splitlines() if line]

    def redis(self, *args: str) -> str:
        return self.compose("exec", "-T", "redis", "redis-cli", "--raw", *args).stdout.strip()


def write_env_file(path: Path, port: int, admin_key: str, extra: dict[str, str]) -> None:
    """The check's .env: .env.example's settings with a fresh password and admin key, the API on
    ``port``, and ``extra`` (short timeouts)."""
    lines = [
        "# written by deploy/compose-check from .env.example",
        "POSTGRES_USER=agentr",
        f"POSTGRES_PASSWORD={secrets.token_hex(16)}",
        "POSTGRES_DB=agentr",
        f"API_PUBLISH_PORT={port}",
        f"AGENTR_ADMIN_KEY={admin_key}",
        *(f"{k}={v}" for k, v in extra.items()),
    ]
    path.write_text("\n".join(lines) + "\n")


MODEL_SCRIPT = """
import json, sys
from pathlib import Path
from agentr.cli.demo import RunOptions, plan_run
from agentr.cli.warm_start import prepare_model
plan = plan_run(RunOptions(quick=True, iterations=1, seed=0, warm_start_steps=200))
ref = prepare_model(plan, Path("/data"), 0)
print("CONFIG " + json.dumps(dict(plan.config, model=ref)))
"""
MODEL_CACHE = Path("/var/tmp/agentr-compose-check-models")  # --reuse only
REUSE_INDEX_PORT = 38917  # --reuse only


def prepare_model(dep: Deployment, reuse: bool) -> tuple[dict[str, Any], str]:
    """(the quick run's config, detail): the tiny model built and warm-started into /data/models by
    ``agentr run --quick``'s own functions (as tests/e2e/helpers.py's ``quick_tiny_model``), in a
    one-off container of the ``trainer`` service. With ``--reuse`` the models folder is kept in
    MODEL_CACHE on the host between calls (a model found there is not made again)."""
    t0 = time.monotonic()
    args = ["run", "--rm", "--no-deps", "-T"]
    command = ["python", "-c", MODEL_SCRIPT]
    if reuse:
        MODEL_CACHE.mkdir(parents=True, exist_ok=True)
        os.chown(MODEL_CACHE, 10001, 10001)  # the images' user `agentr`
        args += ["-v", f"{MODEL_CACHE}:/cache"]
        script = 'mkdir -p /data/models && cp -a /cache/. /data/models/ && python -c "$0" '
        script += "&& cp -a /data/models/. /cache/"
        command = ["sh", "-c", script, MODEL_SCRIPT]
    done = dep.compose(*args, "trainer", *command, timeout=1800)
    line = next((x for x in done.stdout.splitlines() if x.startswith("CONFIG ")), None)
    expect(line, f"the model script printed no config:\n{tail(done.stdout + done.stderr, 20)}")
    assert line is not None
    config = json.loads(line.removeprefix("CONFIG "))
    return config, f"{config['model']} in {time.monotonic() - t0:.0f} s (begun with the services)"


class Background:
    """``fn()`` in a thread; ``result()`` waits for its value or raises its exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._value = fn()
        except BaseException as exc:
            self._error = exc

    def result(self, timeout: float) -> Any:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise CheckFailed(f"still running after {timeout:.0f} s")
        if self._error is not None:
            raise self._error
        return self._value


def quick_config(base: dict[str, Any], **train: Any) -> dict[str, Any]:
    """The services e2e tests' quick run (tests/e2e/services.py): 1 iteration with SFT on the
    Celery trainer and a small evaluation; ``train`` overrides training settings."""
    config = dict(base)
    config.update(
        iterations=1,
        max_eval_tasks=1,
        evaluation={"max_steps": 4, "max_tokens": 32, "recovery_episodes": 1, "baseline": False},
        data_only=False,
        seed=11,
    )
    config["train"] = {**config["train"], **train}
    return config


# ---------------------------------------------------------------------------------------------------
# the API, as a user reaches it through the published port


class Api:
    def __init__(self, base_url: str, admin_key: str) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=60)
        self.admin = {"Authorization": f"Bearer {admin_key}"}
        self.key: dict[str, str] = {}

    def call(self, method: str, path: str, expected: int = 200, admin: bool = False, **kw: Any) -> Any:
        response = self.http.request(method, path, headers=self.admin if admin else self.key, **kw)
        expect(
            response.status_code == expected,
            f"{method} {path}: expected {expected}, got {response.status_code}: {response.text[:500]}",
        )
        kind = response.headers.get("content-type", "").split(";")[0].strip()
        return response.json() if kind == "application/json" else response.text

    def run(self, run_id: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/v1/runs/{run_id}"))

    def dataset(self, run_id: str) -> list[dict[str, Any]]:
        text = self.call("GET", f"/v1/runs/{run_id}/iterations/0/dataset", params={"format": "sharegpt"})
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def content_key(record: dict[str, Any]) -> str:
    """A sample's content without what is run-specific by design (as tests/e2e/test_services_e2e.py):
    its id, and the wording of assistant thoughts (the reflection template is picked by a hash of the
    pair id); observations, actions and loss flags are compared exactly."""
    turns = []
    for turn in record["conversations"]:
        value = turn["value"]
        if turn["from"] == "gpt":
            value = [line for line in value.splitlines() if line.startswith("Action:")]
        turns.append((turn["from"], turn["loss"], value))
    return json.dumps(turns)


def check_dataset(records: list[dict[str, Any]], iteration: dict[str, Any]) -> None:
    expect(records, "the dataset is empty")
    ids = [r["id"] for r in records]
    dupes = [i for i, n in Counter(ids).items() if n > 1]
    expect(not dupes, f"duplicate sample ids: {dupes}")
    expected = iteration["revisions"] + iteration["goods"]
    expect(len(records) == expected, f"{len(records)} samples downloaded, the run counts {expected}")


@dataclass
class RunFacts:
    run: dict[str, Any]
    records: list[dict[str, Any]]
    events: Counter[str]


def event_counts(dep: Deployment, run_id: str) -> Counter[str]:
    """Events per type that belong to the run (its correlation id), from the event store."""
    rows = dep.psql(
        "select event_type, count(*) from events "
        f"where metadata->>'correlation_id' = '{run_id}' group by event_type order by event_type"
    )
    return Counter({kind: int(n) for kind, n in rows})


def finished(api: Api, run_id: str) -> Callable[[], dict[str, Any] | None]:
    def probe() -> dict[str, Any] | None:
        run = api.run(run_id)
        return run if run["status"] in ("completed", "failed", "cancelled") else None

    return probe


def completed(dep: Deployment, api: Api, run_id: str, timeout: float) -> RunFacts:
    run = wait_for(f"run {run_id} to finish", finished(api, run_id), timeout)
    expect(run["status"] == "completed", f"run {run_id} ended {run['status']}: {run.get('reason')}")
    iteration = run["iterations"][0]
    expect(iteration["trees_failed"] == 0, f"{iteration['trees_failed']} trees failed")
    expect(iteration["checkpoint"], f"no checkpoint: {iteration}")
    records = api.dataset(run_id)
    check_dataset(records, iteration)
    return RunFacts(run, records, event_counts(dep, run_id))


def same_data(reference: RunFacts, other: RunFacts, what: str) -> str:
    a, b = reference.run["iterations"][0], other.run["iterations"][0]
    for key in ("trees_done", "pairs", "revisions", "goods"):
        expect(a[key] == b[key], f"{what}: {key} {b[key]}, the undisturbed run {a[key]}")
    expect(
        Counter(map(content_key, other.records)) == Counter(map(content_key, reference.records)),
        f"{what}: the dataset's samples differ from the undisturbed run's",
    )
    differ = {
        k: (reference.events[k], other.events[k])
        for k in reference.events
        if reference.events[k] != other.events[k]
    }
    expect(not differ, f"{what}: events per type (undisturbed, this run) differ: {differ}")
    total = sum(other.events.values())
    return f"{len(other.records)} samples, {total} events of {len(other.events)} types, as undisturbed"


def trace_pair() -> list[dict[str, Any]]:
    """A failed and a successful tool-calling trace of one task (the rules critic marks the failed
    one's refund of the wrong order)."""

    def tool(name: str, arg: str) -> dict[str, Any]:
        schema = {"type": "object", "properties": {arg: {"type": "string"}}}
        return {"type": "function", "function": {"name": name, "parameters": schema}}

    tools = [tool("find_order", "customer"), tool("refund_order", "order_id")]

    def call(cid: str, name: str, args: dict[str, str]) -> dict[str, Any]:
        return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}

    def trace(tid: str, outcome: str, order: str, result: str, answer: str) -> dict[str, Any]:
        find = call(f"{tid}1", "find_order", {"customer": "c-17"})
        refund = call(f"{tid}2", "refund_order", {"order_id": order})
        return {
            "id": tid,
            "task_key": TRACE_TASK,
            "outcome": outcome,
            "tools": tools,
            "messages": [
                {"role": "system", "content": "You are a support agent with order tools."},
                {"role": "user", "content": "Refund my last order, please. I am customer c-17."},
                {"role": "assistant", "content": "Looking it up.", "tool_calls": [find]},
                {"role": "tool", "tool_call_id": f"{tid}1", "content": json.dumps({"orders": ["1234"]})},
                {"role": "assistant", "content": "Refunding it.", "tool_calls": [refund]},
                {"role": "tool", "tool_call_id": f"{tid}2", "content": result},
                {"role": "assistant", "content": answer},
            ],
        }

    return [
        trace(
            "cc-failed",
            "failure",
            "1243",
            "Error: order 1243 not found for customer c-17",
            "Sorry, I could not.",
        ),
        trace(
            "cc-ok", "success", "1234", json.dumps({"status": "refunded"}), "Done: order 1234 is refunded."
        ),
    ]


# ---------------------------------------------------------------------------------------------------
# training, seen from the Celery result backend and the trainer's log


def training_task(dep: Deployment, run_id: str) -> str | None:
    """The Celery task id of the run's training job, once the trainer logged that it started it."""
    found = re.findall(
        rf"training run {run_id} iteration \d+ on dataset \S+ \(task ([\w-]+)\)", dep.logs("trainer", 2000)
    )
    return found[-1] if found else None


def task_meta(dep: Deployment, task_id: str) -> dict[str, Any]:
    """The task's state in Celery's Redis result backend (``{}`` before it has one)."""
    keys = dep.redis("--scan", "--pattern", f"*celery-task-meta-{task_id}").split()
    if not keys:
        return {}
    raw = dep.redis("GET", keys[0])
    return dict(json.loads(raw)) if raw else {}


def training_step(dep: Deployment, task_id: str) -> int:
    meta = task_meta(dep, task_id)
    result = meta.get("result")
    if meta.get("status") != "PROGRESS" or not isinstance(result, dict):
        return 0
    return int(result.get("step", 0))


def training_under_way(
    dep: Deployment, api: Api, run_id: str, min_step: int
) -> Callable[[], tuple[str, int] | None]:
    """The run's training task and its step once it is at ``min_step`` or later; CheckFailed at once
    where that can no longer happen (the run ended, or the job ended before the step was seen), so a
    step fails with the reason instead of waiting out its timeout."""

    def probe() -> tuple[str, int] | None:
        run = api.run(run_id)
        expect(
            run["status"] not in ("completed", "failed", "cancelled"),
            f"run {run_id} ended {run['status']} ({run.get('reason')}) before its training was seen",
        )
        task_id = training_task(dep, run_id)
        if task_id is None:
            return None
        meta = task_meta(dep, task_id)
        expect(
            meta.get("status") not in ("SUCCESS", "FAILURE", "REVOKED"),
            f"training task {task_id} ended {meta.get('status')} before step {min_step} was seen",
        )
        step = training_step(dep, task_id)
        return (task_id, step) if step >= min_step else None

    return probe


# ---------------------------------------------------------------------------------------------------
# the check


@dataclass
class Context:
    args: argparse.Namespace
    work: Path
    sh: Shell
    steps: Steps
    daemon: subprocess.Popen[bytes] | None = None
    index: WheelIndex | None = None
    dep: Deployment | None = None
    api: Api | None = None
    standins: bool = False
    config: dict[str, Any] = field(default_factory=dict)
    reference: RunFacts | None = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploy/compose-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, help="logs and scratch files (default: a new temp folder)")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="development only: keep (and reuse) images, layer cache and the engine between calls",
    )
    parser.add_argument("--keep-up", action="store_true", help="leave the stack running (no down -v)")
    args = parser.parse_args(argv)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="agentr-compose-check-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTR_", "POSTGRES_", "COMPOSE_"))}
    ctx = Context(args, work, Shell(work / "commands.log", env), Steps())
    print(f"compose check: logs in {work} (commands.log: every command and its output)", flush=True)
    # a CI timeout or ^C: the teardown (down -v, images, the engine this check started) still runs
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGHUP, _interrupted)
    try:
        run_steps(ctx)
    except Abort as exc:
        print(f"SKIP the remaining steps: they need `{exc}`, which failed", flush=True)
    except KeyboardInterrupt as exc:
        ctx.steps._line("FAIL", "interrupted", 0.0, str(exc) or "^C: tearing down")
    finally:
        teardown(ctx)
    return ctx.steps.summary()


def _interrupted(signum: int, _frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one teardown, not interrupted again
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}: tearing down")


def run_steps(ctx: Context) -> None:
    steps, sh = ctx.steps, ctx.sh
    with steps.step("engine: a Docker engine answers", critical=True) as info:
        info["detail"], ctx.daemon = ensure_engine(sh, ctx.work)
    with steps.step("compose plugin: docker compose v2", critical=True) as info:
        info["detail"] = ensure_compose_plugin(sh, ctx.work)
        ctx.sh.run(["docker", "compose", "-p", PROJECT, "down", "-v", "--remove-orphans"], check=False)
        if not ctx.args.reuse:
            removed = remove_images(sh)
            if removed:
                info["detail"] += f"; removed images of an earlier run: {', '.join(removed)}"
    with steps.step("base images: python, postgres, redis", critical=True) as info:
        ctx.standins, info["detail"] = base_images(sh, ctx.work, ctx.args.reuse)
    torch_index = None
    with steps.step("torch wheel index", critical=True) as info:
        if reachable("https://download.pytorch.org/whl/cpu/torch/"):
            info["detail"] = "download.pytorch.org answers: the Dockerfile's default index"
        else:
            ctx.index = WheelIndex(ctx.work / "wheel-index")
            n = ctx.index.fill(sh)
            # --reuse: a fixed port, so the torch layer's build argument (and its cache) stays the same
            torch_index = ctx.index.start(REUSE_INDEX_PORT if ctx.args.reuse else 0)
            info["detail"] = f"download.pytorch.org unreachable: local index {torch_index}/cpu ({n} wheels)"
    with steps.step("build agentr:base and agentr:ml", critical=True) as info:
        info["detail"] = build_agentr_images(sh, torch_index, legacy_builder=ctx.standins)
        if ctx.index is not None:
            ctx.index.stop()
    with steps.step("up: every service healthy, migrate exited 0", critical=True) as info:
        port = free_port()
        env_file = ctx.work / "check.env"
        admin_key = "check-admin-" + secrets.token_hex(16)
        write_env_file(env_file, port, admin_key, CHECK_SETTINGS)
        files = [ROOT / "docker-compose.yml"]
        if ctx.standins:
            files.append(STANDINS / "compose.standins.yml")
        ctx.dep = dep = Deployment(sh, files, env_file, port, admin_key)
        dep.compose("up", "-d", "--no-build")
        t0 = time.monotonic()
        # the model is made in a one-off container while the services start (they need none of it)
        model = Background(lambda: prepare_model(dep, ctx.args.reuse))
        summary = dep.wait_healthy({s: 1 for s in SERVICES}, 600)
        info["detail"] = f"{summary} healthy {time.monotonic() - t0:.0f} s after up; API on 127.0.0.1:{port}"
    dep = ctx.dep
    assert dep is not None or steps.aborted
    with steps.step("migrate again: exits 0, changes nothing") as info:
        assert dep is not None
        before = dep.psql("select version_num from alembic_version")
        dep.compose("run", "--rm", "--no-deps", "migrate")
        after = dep.psql("select version_num from alembic_version")
        expect(before == after, f"the schema version moved: {before} -> {after}")
        info["detail"] = f"the schema stays at revision {after[0][0]}"
    with steps.step("model: a warm-started tiny model in /data/models", critical=True) as info:
        ctx.config, detail = model.result(timeout=1800)
        info["detail"] = detail
    readme_flow(ctx)
    disturbed_run(ctx)
    cancelled_run(ctx)


def readme_flow(ctx: Context) -> None:
    steps, dep = ctx.steps, ctx.dep
    with steps.step("README: project and key with the admin key", critical=True) as info:
        assert dep is not None
        api = ctx.api = Api(f"http://127.0.0.1:{dep.port}", dep.admin_key)
        expect(api.http.get("/readyz").status_code == 200, "GET /readyz is not 200")
        project = api.call("POST", "/v1/projects", 201, admin=True, json={"name": "compose-check"})
        issued = api.call(
            "POST",
            f"/v1/projects/{project['project_id']}/keys",
            201,
            admin=True,
            json={"scopes": ["run", "read", "ingest"], "label": "compose-check"},
        )
        api.key = {"Authorization": f"Bearer {issued['key']}"}
        info["detail"] = f"project {project['project_id']}"
    with steps.step(
        "README: a quick TextCraft run over HTTP completes, dataset downloaded", critical=True
    ) as info:
        assert dep is not None and ctx.api is not None
        api = ctx.api
        run_id = api.call("POST", "/v1/runs", 202, json=quick_config(ctx.config))["run_id"]
        t0 = time.monotonic()
        ctx.reference = facts = completed(dep, api, run_id, timeout=900)
        it = facts.run["iterations"][0]
        expect(it["revisions"] > 0 and it["goods"] > 0, f"no revisions or no goods: {it}")
        expect(facts.events["ModelTrained"] == 1, f"ModelTrained {facts.events['ModelTrained']} times")
        info["detail"] = (
            f"run {run_id} in {time.monotonic() - t0:.0f} s: {it['trees_done']} trees, {it['pairs']} pairs, "
            f"{it['revisions']} revisions, {it['goods']} goods, trained on the Celery trainer"
        )
    with steps.step(
        "README: a failed + a successful trace become a revision; trace dataset downloaded"
    ) as info:
        assert ctx.api is not None
        api = ctx.api
        accepted = api.call("POST", "/v1/traces", 202, json={"format": "openai", "traces": trace_pair()})
        failed_id, ok_id = accepted["trace_ids"]
        t0 = time.monotonic()

        def revised() -> dict[str, Any] | None:
            trace = api.call("GET", f"/v1/traces/{failed_id}")
            return trace if trace["status"] == "revised" else None

        trace = wait_for("the failed trace to be revised", revised, 180)
        seconds = time.monotonic() - t0
        expect(trace["critique"]["transition_index"] is not None, f"no critique: {trace}")
        made = api.call(
            "POST",
            "/v1/datasets",
            201,
            json={"name": "compose-check-traces", "query": {"task_keys": [TRACE_TASK]}},
        )
        text = api.call("GET", f"/v1/datasets/{made['dataset_id']}/download", params={"format": "sharegpt"})
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
        expect(len(records) == 2, f"the trace dataset holds {len(records)} samples, not 2 (revision + good)")
        info["detail"] = (
            f"revised in {seconds:.0f} s (t' = step {trace['critique']['transition_index']}), {ok_id} good"
        )


def search_consumers(dep: Deployment) -> dict[str, int]:
    """Pending SearchRequested messages per search consumer (consumer names carry the host name,
    which is the container's short id)."""
    stream = next(k for k in dep.redis("--scan", "--pattern", "*:ev:SearchRequested").split())
    out = dep.redis("XINFO", "CONSUMERS", stream, "search").splitlines()
    pending: dict[str, int] = {}
    for i, word in enumerate(out[:-1]):
        if word == "name":
            name = out[i + 1]
            pending[name] = int(out[out.index("pending", i) + 1])
    return pending


def pending_ids(dep: Deployment, consumer: str) -> set[str]:
    """Ids of the SearchRequested messages ``consumer`` holds unacknowledged (XPENDING's
    extended form: id, consumer, idle ms, deliveries per message)."""
    stream = next(k for k in dep.redis("--scan", "--pattern", "*:ev:SearchRequested").split())
    out = dep.redis("XPENDING", stream, "search", "-", "+", "1000", consumer).splitlines()
    return set(out[0::4])


def disturbed_run(ctx: Context) -> None:
    steps, dep, api = ctx.steps, ctx.dep, ctx.api
    run_id = ""
    with steps.step("scale: --scale search=2, both healthy", critical=True) as info:
        assert dep is not None
        t0 = time.monotonic()
        dep.compose("up", "-d", "--no-build", "--scale", "search=2")
        counts = {**{s: 1 for s in SERVICES}, "search": 2}
        dep.wait_healthy(counts, 180)
        info["detail"] = f"2 search replicas healthy in {time.monotonic() - t0:.0f} s"
    with steps.step("kill a search replica mid-search: the other takes over, same data") as info:
        assert dep is not None and api is not None and ctx.reference is not None
        # the same run, training long enough to be killed mid-job in the next step: the time budget,
        # not the epochs, ends it (40 epochs of 2 samples ended before a loaded machine's probe saw
        # step 3), and short enough that the job trained again after the kill ends well in time
        config = quick_config(ctx.config, epochs=400.0, time_budget_s=150.0, logging_steps=1)
        run_id = api.call("POST", "/v1/runs", 202, json=config)["run_id"]

        replicas = dep.container_ids("search")

        def busy_replica() -> tuple[str, str, set[str]] | None:
            """A replica frozen (``docker pause``) while it holds a message, and what it holds. A tree
            takes about 2 s, less than a probe's docker calls: a replica seen holding one may have
            acknowledged it by the time it is killed (stop 54's CI), but a frozen one cannot, so the
            messages read after the freeze are the ones it dies with."""
            holders = [name for name, n in search_consumers(dep).items() if n > 0]
            for cid in replicas:
                for name in holders:
                    if f"-{cid[:12]}-" not in name:
                        continue
                    dep.sh.run(["docker", "pause", cid])
                    time.sleep(0.3)  # an acknowledgement already on its way lands
                    held = pending_ids(dep, name)
                    if held:
                        return cid, name, held
                    dep.sh.run(["docker", "unpause", cid])  # it finished its tree before the freeze
            its = api.run(run_id)["iterations"]
            expect(
                not its or its[0]["trees_done"] < its[0]["trees_expected"],
                "every tree of the run finished before a replica could be caught holding one",
            )
            return None

        victim, consumer, held = wait_for(
            "a search replica holding one of the run's trees", busy_replica, 300, 0.1
        )
        dep.sh.run(["docker", "kill", victim])
        killed_at = time.monotonic()

        def exited() -> str | None:
            state = dep.sh.run(["docker", "inspect", "-f", "{{.State.Status}}", victim]).stdout.strip()
            if state == "paused":  # an engine that queues the signal until the container thaws
                dep.sh.run(["docker", "unpause", victim], check=False)
            return state if state == "exited" else None

        wait_for(f"the killed replica {victim[:12]} to exit", exited, 30, 0.5)

        def dataset_ready() -> dict[str, Any] | None:
            run = api.run(run_id)
            expect(run["status"] not in ("failed", "cancelled"), f"run {run['status']}: {run.get('reason')}")
            its = run["iterations"]
            return run if its and its[0].get("dataset_id") else None

        run = wait_for("the disturbed run's dataset", dataset_ready, 600)
        took = time.monotonic() - killed_at
        records = api.dataset(run_id)
        check_dataset(records, run["iterations"][0])
        reference = ctx.reference
        expect(
            Counter(map(content_key, records)) == Counter(map(content_key, reference.records)),
            "the dataset's samples differ from the undisturbed run's",
        )
        # the proof of the take-over: the messages the killed replica held are no longer its own
        # (another consumer claimed them, processed and acknowledged them) and a survivor said so
        survivor = dep.container_ids("search")
        expect(held, f"the killed replica {victim[:12]} held no message when it was killed")
        still = held & pending_ids(dep, consumer)
        expect(not still, f"the killed replica's messages {sorted(still)} were never reclaimed")
        reclaims = dep.logs("search", 2000).count("reclaimed message")
        expect(reclaims > 0, "no search replica logged reclaiming a message")
        info["detail"] = (
            f"killed {victim[:12]} holding {len(held)} message(s); a survivor reclaimed them ({reclaims} "
            f"reclaim(s) logged); dataset ready {took:.0f} s later, {len(records)} samples as "
            f"undisturbed; {len(survivor)} replica left"
        )
        dep.compose("up", "-d", "--no-build", "--scale", "search=2", "search")
    with steps.step(
        f"kill the trainer mid-job, start it again: the run completes within {KILL_DEADLINE_S} s"
    ) as info:
        assert dep is not None and api is not None and ctx.reference is not None
        expect(run_id, "no disturbed run (the previous step failed before submitting it)")
        task_id, step = wait_for(
            "the trainer to be training the run", training_under_way(dep, api, run_id, 3), 600, 1.0
        )
        trainer = dep.container_ids("trainer")[0]
        dep.sh.run(["docker", "kill", trainer])
        killed_at = time.monotonic()
        state = dep.sh.run(["docker", "inspect", "-f", "{{.State.Status}}", trainer]).stdout.strip()
        expect(
            state == "exited",
            f"the killed trainer is {state} (restart: unless-stopped leaves a killed one down)",
        )
        dep.compose("start", "trainer")
        facts = completed(dep, api, run_id, timeout=KILL_DEADLINE_S)
        took = time.monotonic() - killed_at
        expect(facts.events["ModelTrained"] == 1, f"ModelTrained {facts.events['ModelTrained']} times")
        summary = same_data(ctx.reference, facts, "the run with a killed search replica and trainer")
        info["detail"] = (
            f"killed at step {step} of task {task_id}; completed {took:.0f} s after the kill; {summary}"
        )


def cancelled_run(ctx: Context) -> None:
    steps, dep, api = ctx.steps, ctx.dep, ctx.api
    with steps.step(f"cancel a run while it trains: training stops within {CANCEL_DEADLINE_S} s") as info:
        assert dep is not None and api is not None
        config = quick_config(ctx.config, epochs=400.0, time_budget_s=600.0, logging_steps=1)
        run_id = api.call("POST", "/v1/runs", 202, json=config)["run_id"]
        task_id, step = wait_for(
            "the trainer to be training the run", training_under_way(dep, api, run_id, 3), 900, 1.0
        )
        api.call("POST", f"/v1/runs/{run_id}/cancel", 202, json={"reason": "compose check"})
        cancelled_at = time.monotonic()

        def stopped() -> str | None:
            meta = task_meta(dep, task_id)
            return (
                str(meta.get("status")) if meta.get("status") in ("REVOKED", "FAILURE", "SUCCESS") else None
            )

        final = wait_for(f"training task {task_id} to stop", stopped, CANCEL_DEADLINE_S, 0.5)
        took = time.monotonic() - cancelled_at
        expect(final == "REVOKED", f"the cancelled run's training ended {final}, not REVOKED")
        run = wait_for(f"run {run_id} to read cancelled", finished(api, run_id), 60, 1.0)
        expect(run["status"] == "cancelled", f"the run is {run['status']}, not cancelled")
        events = event_counts(dep, run_id)
        expect(events["ModelTrained"] == 0, "the cancelled run recorded a trained model")
        info["detail"] = (
            f"cancelled at step {step}; task {task_id} {final} {took:.1f} s later; the run stays cancelled"
        )


def teardown(ctx: Context) -> None:
    steps, dep = ctx.steps, ctx.dep
    if ctx.index is not None:
        ctx.index.stop()
    if dep is not None:
        dep.sh.run(
            [
                "sh",
                "-c",
                f"docker compose -p {PROJECT} logs --no-color -t > {ctx.work / 'services.log'} 2>&1",
            ],
            check=False,
        )
    if dep is not None and not ctx.args.keep_up:
        steps.aborted = None  # down runs whatever failed before
        with steps.step("down -v: containers, network and volumes gone") as info:
            dep.compose("down", "-v", "--remove-orphans", "--timeout", "30")
            left = ctx.sh.run(
                ["docker", "volume", "ls", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}"]
            ).stdout.split()
            running = ctx.sh.run(
                ["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}"]
            ).stdout.split()
            expect(not left and not running, f"left behind: volumes {left}, containers {running}")
            info["detail"] = f"service logs kept in {ctx.work / 'services.log'}"
    if not ctx.args.reuse:
        # downloads live only as long as the run: the wheel index, apt lists, build contexts
        for scratch in ("wheel-index", "apt", "standins", "bookworm-root"):
            shutil.rmtree(ctx.work / scratch, ignore_errors=True)
        removed = remove_images(ctx.sh)
        print(f"removed images: {', '.join(removed) or 'none'}", flush=True)
        if ctx.daemon is not None:
            ctx.daemon.send_signal(signal.SIGTERM)
            try:
                ctx.daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                ctx.daemon.kill()
            print("stopped the dockerd this check started", flush=True)
            with contextlib.suppress(OSError):  # the cpu cgroup it made (empty once dockerd is gone)
                CGROUP_V1_DOCKER.rmdir()


if __name__ == "__main__":
    sys.exit(main())
