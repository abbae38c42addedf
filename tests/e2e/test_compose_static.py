"""Static checks of the deployment files (no Docker engine here): docker-compose.yml, Dockerfile,
.dockerignore and .env.example agree with each other and with the code.

* every agentr service (and healthcheck) runs a real ``agentr`` command: ``agentr ... --help`` exits 0;
* dependencies wait for health / migrations, and every awaited service has a healthcheck;
* every build target is a Dockerfile stage, the ``base`` stage works without torch, images run as
  a non-root user, and everything the Dockerfile copies is in the build context;
* every AGENTR_* setting is documented in .env.example (with its true default) and passed to the
  services; every compose variable is documented;
* ``agentr up`` starts the same processes with the same commands as compose;
* the file validates against the official compose-spec JSON schema (the copy check-jsonschema
  vendors as ``vendor.compose-spec``), beside the project-specific checks above.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentr.cli.up import SERVICES, plan, service_args
from agentr.process import WORKER_NAMES, load_service_factory
from core.runtime.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
AGENTR = str(Path(sys.executable).parent / "agentr")
INFRA = {"postgres", "redis", "vllm"}  # third-party images; every other service is an agentr image
EXPECTED = {
    "postgres",
    "redis",
    "migrate",
    "api",
    "relay",
    "search",
    "critic",
    "splice",
    "train",
    "trainer",
    "vllm",
    "flower",
}
# Settings compose fixes for its own network (the rest pass through from .env / the shell).
FIXED_IN_COMPOSE = {"AGENTR_DATABASE_URL", "AGENTR_REDIS_URL", "AGENTR_HOME"}
# AGENTR_* variables read outside Settings (documented in .env.example all the same).
EXTRA_VARIABLES = {"AGENTR_MIGRATIONS", "AGENTR_HF_PREFIX_CACHE_MB", "AGENTR_HF_DECODE_THREADS"}
# ... of which these are set by the images themselves (Dockerfile), not passed through by compose.
SET_BY_THE_IMAGES = {"AGENTR_MIGRATIONS"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


@pytest.fixture(scope="module")
def env_example() -> dict[str, str]:
    """Every ``NAME=value`` of .env.example, commented out or not."""
    found: dict[str, str] = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        match = re.match(r"^#?\s*([A-Z][A-Z0-9_]*)=(.*)$", line.strip())
        if match:
            found[match.group(1)] = match.group(2).strip()
    return found


def dockerfile_stages() -> dict[str, list[str]]:
    """Stage name -> its instruction lines (continuations joined); the FROM line first."""
    stages: dict[str, list[str]] = {}
    current: list[str] | None = None
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE)
        if match:
            current = stages.setdefault(match.group(2) or f"<unnamed {len(stages)}>", [])
        if current is not None:
            current.append(line)
    return stages


def agentr_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in services.items() if name not in INFRA}


def command_list(svc: dict[str, Any]) -> list[str]:
    command = svc["command"]
    return shlex.split(command) if isinstance(command, str) else list(command)


def run_help(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([AGENTR, *args, "--help"], capture_output=True, text=True, timeout=120, env=env)


def _compose_spec_schema() -> dict[str, Any]:
    import json
    from importlib.resources import files

    vendored = files("check_jsonschema") / "builtin_schemas" / "vendor" / "compose-spec.json"
    return dict(json.loads(vendored.read_text(encoding="utf-8")))


def test_compose_file_validates_against_the_compose_spec_schema(compose: dict[str, Any]) -> None:
    import jsonschema

    schema = _compose_spec_schema()
    assert "services" in schema["properties"]  # it is the compose-spec document
    validator_class = jsonschema.validators.validator_for(schema)
    errors = sorted(validator_class(schema).iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)
    # the schema is not vacuous: a typo in a service key is caught
    broken = {
        **compose,
        "services": {**compose["services"], "api": {**compose["services"]["api"], "imgae": "x"}},
    }
    assert any(validator_class(schema).iter_errors(broken))
    # and the same validation through check-jsonschema's own CLI
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "check-jsonschema"),
            "--builtin-schema",
            "vendor.compose-spec",
            str(ROOT / "docker-compose.yml"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_expected_service_is_there_with_its_profile(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == EXPECTED
    assert services["vllm"]["profiles"] == ["vllm"]
    assert services["flower"]["profiles"] == ["flower"]
    for name in EXPECTED - {"vllm", "flower"}:
        assert "profiles" not in services[name], f"{name} must start with a plain `docker compose up`"


def test_every_agentr_service_runs_a_real_agentr_command(services: dict[str, dict[str, Any]]) -> None:
    commands: list[list[str]] = []
    for name, svc in agentr_services(services).items():
        command = command_list(svc)
        assert command[0] == "agentr", f"service {name} runs {command}, not an agentr command"
        commands.append(command[1:])
        health = svc.get("healthcheck", {}).get("test")
        if isinstance(health, list) and health[0] == "CMD-SHELL" and health[1].startswith("agentr "):
            commands.append(shlex.split(health[1])[1:])
        elif isinstance(health, list) and health[0] == "CMD" and health[1] == "agentr":
            commands.append(health[2:])
        if command[1] == "worker":
            assert command[2] in WORKER_NAMES, f"service {name}: unknown worker {command[2]!r}"
            if command[2] != "relay":
                assert callable(load_service_factory(command[2]))
    failures = []
    for args in {tuple(c) for c in commands}:
        done = run_help(list(args))
        if done.returncode != 0 or "Usage" not in done.stdout:
            failures.append(f"agentr {' '.join(args)} --help -> exit {done.returncode}: {done.stderr[-500:]}")
    assert not failures, "\n".join(failures)


def test_dependencies_wait_for_health_and_migrations(services: dict[str, dict[str, Any]]) -> None:
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["migrate"]["restart"] == "no", "a one-shot migration must not be restarted"
    assert command_list(services["migrate"])[1:] == ["db", "upgrade"]
    for name in ("api", "relay", "search", "critic", "splice", "train"):
        deps = services[name]["depends_on"]
        assert deps["postgres"]["condition"] == "service_healthy", name
        assert deps["redis"]["condition"] == "service_healthy", name
        assert deps["migrate"]["condition"] == "service_completed_successfully", name
    for name in ("trainer", "flower"):
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy", name
    for name in ("search", "critic"):  # wait for the model server, only when its profile is on
        assert services[name]["depends_on"]["vllm"] == {"condition": "service_healthy", "required": False}
    for name, svc in services.items():
        for dep, spec in svc.get("depends_on", {}).items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep}'s health, which has no check"
            elif spec["condition"] == "service_completed_successfully":
                assert services[dep].get("restart") == "no", f"{dep} must be one-shot"


def test_healthchecks_and_volumes(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    for name in EXPECTED - {"migrate", "flower"}:
        test = services[name].get("healthcheck", {}).get("test")
        assert test and test[0] in ("CMD", "CMD-SHELL"), f"{name} has no healthcheck"
    assert "/readyz" in " ".join(services["api"]["healthcheck"]["test"])
    for name in ("relay", "search", "critic", "splice", "train"):
        # health = the worker's own metrics port answers AND its database and Redis do (agentr health)
        port = command_list(services[name])[command_list(services[name]).index("--metrics-port") + 1]
        health = services[name]["healthcheck"]["test"]
        assert health == ["CMD", "agentr", "health", "--metrics-port", port], name
    # the trainer: its heartbeat (written by a thread, also mid-job) + the broker, not Celery's ping
    assert services["trainer"]["healthcheck"]["test"] == ["CMD-SHELL", "agentr celery-worker --ping"]
    assert services["postgres"]["volumes"] == ["pgdata:/var/lib/postgresql/data"]
    assert services["redis"]["volumes"] == ["redisdata:/data"]
    for name in agentr_services(services):
        assert "agentr-data:/data" in services[name]["volumes"], f"{name} must share the data volume"
        assert services[name]["environment"]["AGENTR_HOME"] == "/data"
    assert {"pgdata", "redisdata", "agentr-data"} <= set(compose["volumes"])


def test_scaled_services_can_run_several_copies(services: dict[str, dict[str, Any]]) -> None:
    for name in ("search", "critic", "splice", "train", "trainer", "relay"):
        assert "container_name" not in services[name], f"{name}: a fixed container name prevents --scale"
        assert "ports" not in services[name], f"{name}: a published port prevents --scale"


def test_build_targets_are_stages_and_images_split_torch(services: dict[str, dict[str, Any]]) -> None:
    stages = dockerfile_stages()
    targets = {name: svc["build"]["target"] for name, svc in agentr_services(services).items()}
    for name, target in targets.items():
        assert target in stages, f"service {name} builds target {target!r}, not a Dockerfile stage"
    for name in ("api", "relay", "splice", "migrate"):
        assert targets[name] == "base", name
    for name in ("search", "critic", "train", "trainer"):
        assert targets[name] == "ml", name
    assert stages["base"][0].split()[1].startswith("python:${PYTHON_VERSION}-slim")
    assert re.search(r"ARG PYTHON_VERSION=3\.11\b", (ROOT / "Dockerfile").read_text())
    base_runs = " ".join(line for line in stages["base"] if line.startswith("RUN"))
    assert "torch" not in base_runs and "[ml]" not in base_runs, "the base image must not install torch"
    import tomllib

    core_deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(dep.startswith("pyarrow") for dep in core_deps), (
        "the API imports pyarrow (Parquet downloads): the base image (core dependencies) needs it"
    )
    ml_runs = " ".join(line for line in stages["ml"] if line.startswith("RUN"))
    assert "torch==${TORCH_VERSION}" in ml_runs and '".[ml]"' in ml_runs
    assert stages["ml"][0].split()[1] == "base"


def test_every_image_runs_as_a_non_root_user(services: dict[str, dict[str, Any]]) -> None:
    stages = dockerfile_stages()

    def final_user(stage: str) -> str:
        users = [line.split()[1] for line in stages[stage] if line.startswith("USER ")]
        if users:
            return users[-1]
        parent = stages[stage][0].split()[1]
        return final_user(parent) if parent in stages else "root"

    for name, svc in agentr_services(services).items():
        user = final_user(svc["build"]["target"])
        assert user not in ("root", "0"), f"service {name} would run as root"


def test_base_stage_services_import_without_torch() -> None:
    """What the `base` image runs (api, relay, splice, migrate, Celery client) must not need torch."""
    probe = (
        "import sys\n"
        "for name in ('torch', 'transformers', 'tokenizers', 'peft', 'accelerate', 'datasets',\n"
        "             'scienceworld'):\n"
        "    sys.modules[name] = None\n"
        "import api.app, core.runtime.relay, core.store.migrate, agentr.cli\n"
        "from agentr.process import load_service_factory\n"
        "load_service_factory('splice')\n"
        "import train_service.celery_app\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_dockerfile_copies_exist_in_the_build_context() -> None:
    ignored = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#") and not line.startswith("!")
    ]
    for stage in dockerfile_stages().values():
        for line in stage:
            if not line.startswith("COPY ") or "--from" in line:
                continue
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), f"Dockerfile copies {source}, which is not in the repository"
                hits = [p for p in ignored if fnmatch.fnmatch(source, p)]
                assert not hits, f"Dockerfile copies {source}, but .dockerignore excludes it ({hits})"


def test_every_setting_is_documented_with_its_default(env_example: dict[str, str]) -> None:
    for field_name, field in Settings.model_fields.items():
        variable = f"AGENTR_{field_name.upper()}"
        assert variable in env_example, f"{variable} is not documented in .env.example"
        assert field.description, f"{variable} has no description in Settings"
        if field.default is None or variable in FIXED_IN_COMPOSE - {"AGENTR_HOME"}:
            continue
        written = env_example[variable]
        parsed = Settings(**{field_name: written})  # the way the variable would be read
        assert getattr(parsed, field_name) == field.default, (
            f".env.example shows {variable}={written}, but the default is {field.default!r}"
        )


def test_every_variable_compose_uses_is_documented(
    services: dict[str, dict[str, Any]], env_example: dict[str, str]
) -> None:
    text = (ROOT / "docker-compose.yml").read_text() + (ROOT / "Dockerfile").read_text()
    used = set(re.findall(r"\bAGENTR_[A-Z0-9_]+", text))
    known = {f"AGENTR_{f.upper()}" for f in Settings.model_fields} | EXTRA_VARIABLES
    assert used <= known, f"compose/Dockerfile use variables no code reads: {sorted(used - known)}"
    assert known <= set(env_example), f"undocumented: {sorted(known - set(env_example))}"
    interpolated = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", (ROOT / "docker-compose.yml").read_text()))
    assert interpolated <= set(env_example), f"undocumented: {sorted(interpolated - set(env_example))}"
    # Every setting reaches every agentr service, fixed or passed through.
    for name, svc in agentr_services(services).items():
        missing = known - SET_BY_THE_IMAGES - {"AGENTR_API_HOST", "AGENTR_API_PORT"} - set(svc["environment"])
        assert not missing, f"service {name} does not receive {sorted(missing)}"


def test_gpu_reservations_vllm_and_trainer(services: dict[str, dict[str, Any]]) -> None:
    device = services["vllm"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    # The trainer's reservation is documented as a commented block: uncommented, it must be valid.
    lines = (ROOT / "docker-compose.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "trainer:")
    block = []
    for line in lines[start + 1 :]:
        if line.startswith("  ") and not line.startswith("   ") and line.strip().endswith(":"):
            break  # the next service
        if line.startswith("    # ") and (block or line.strip() == "# deploy:"):
            block.append("    " + line[len("    # ") :])
    reservation = yaml.safe_load("\n".join(line[4:] for line in block))
    device = reservation["deploy"]["resources"]["reservations"]["devices"][0]
    assert device == {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}


def test_vllm_is_reachable_by_the_documented_model_ref(
    services: dict[str, dict[str, Any]], env_example: dict[str, str]
) -> None:
    from core.llm.registry import split_openai_ref

    command = services["vllm"]["command"]
    served = command[command.index("--served-model-name") + 1]
    port = command[command.index("--port") + 1]
    assert served == "${VLLM_SERVED_NAME:-agent}" and env_example["VLLM_SERVED_NAME"] == "agent"
    ref = f"http://vllm:{port}/v1#agent"
    assert ref in (ROOT / "docker-compose.yml").read_text() and ref in (ROOT / ".env.example").read_text()
    assert split_openai_ref(ref) == (f"http://vllm:{port}/v1", "agent")


def test_agentr_up_starts_the_compose_topology(services: dict[str, dict[str, Any]]) -> None:
    long_running = {
        name for name in agentr_services(services) if name != "migrate" and "profiles" not in services[name]
    }
    assert set(SERVICES) == long_running
    for name in SERVICES:
        compose_args = command_list(services[name])[1:]
        options_at = next((i for i, a in enumerate(compose_args) if a.startswith("--")), len(compose_args))
        assert tuple(compose_args[:options_at]) == service_args(name), name
    assert [spec.name for spec in plan({"search": 2})].count("search") == 0
    assert {"search.1", "search.2"} <= {spec.name for spec in plan({"search": 2})}


def test_deployment_docs_match_the_files(services: dict[str, dict[str, Any]]) -> None:
    """The README's short Deployment section and docs/deployment.md (the whole story) name only
    compose services, profiles and agentr commands that exist."""
    readme = (ROOT / "README.md").read_text()
    assert "## Deployment" in readme, "README.md must point at the deployment"
    assert "docs/deployment.md" in readme.split("## Deployment", 1)[1].split("\n## ", 1)[0]
    sections = {
        "README.md": readme.split("## Deployment", 1)[1].split("\n## ", 1)[0],
        "docs/deployment.md": (ROOT / "docs" / "deployment.md").read_text(),
    }
    assert "docker compose up" in sections["docs/deployment.md"]
    for where, section in sections.items():
        for name in re.findall(r"--scale\s+([a-z-]+)=", section):
            assert name in services, f"{where} scales {name}, which is not a compose service"
        for profile in re.findall(r"--profile\s+([a-z-]+)", section):
            assert any(profile in svc.get("profiles", []) for svc in services.values()), (where, profile)
        for command in re.findall(r"`(agentr [a-z][a-z-]*(?: [a-z][a-z-]*)?)", section):
            done = run_help(command.split()[1:])
            assert done.returncode == 0, f"{where} mentions `{command}`, which fails: {done.stderr[-300:]}"
