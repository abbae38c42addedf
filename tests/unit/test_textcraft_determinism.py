"""TextCraft observations are byte-identical across processes and PYTHONHASHSEED values."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import hashlib, json
from core.envs.textcraft import TextCraftEnv, solve, recipe_book
env = TextCraftEnv()
book = recipe_book()
out = {"goals": book.goals, "splits": {s: env.task_ids(s) for s in ("train", "test", "demo")}}
for task_id in env.task_ids("all"):
    obs = env.reset_sync(task_id)
    trace = [obs] + [env.step_sync(a).observation for a in solve(env.goal)[:6]]
    trace.append(env.step_sync("inventory").observation)
    out[task_id] = hashlib.sha256("\\x00".join(trace).encode()).hexdigest()
print(json.dumps(out, sort_keys=True))
"""


def _run(hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def test_observations_identical_across_hash_seeds() -> None:
    first, second = _run("1"), _run("4242")
    assert len(first) > 544 * 64
    assert hashlib.sha256(first.encode()).hexdigest() == hashlib.sha256(second.encode()).hexdigest()
