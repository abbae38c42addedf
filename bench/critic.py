"""Benchmark: the prefix-sharing model critic against the naive one-prompt-per-step critic.

On the tiny Llama model (built locally, as the tests do), judge every step of 20-step TextCraft paths
(real observations) with the SAME prompts and labels three ways, side by side in one run:

- ours: ``PrefixScorer`` with KV reuse (the shared history is computed once per path);
- naive: ``PrefixScorer`` with reuse off (one full prompt per step, same code otherwise);
- port-naive: ``HFPolicy.score_labels`` called once per step (what a plain Policy client would do).

Early exit is OFF so every step is judged (the full cost). Prints one JSON line per comparison:
tokens processed and wall time, ratio = baseline / ours (higher is better).
Usage: python bench/critic.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


async def build_paths(n_paths: int, length: int) -> list:
    from core.domain.trajectory import Step, Trajectory
    from core.envs.textcraft import TextCraftEnv
    from core.envs.textcraft.solver import solve

    env = TextCraftEnv(distractors=2)
    paths = []
    deep = [t for t in env.task_ids("test") if len(solve(env.goal_of(t))) >= 3]
    for task_id in deep[:n_paths]:
        task = await env.reset(task_id)
        gold = solve(env.goal_of(task_id))
        actions = (gold[:-1] + ["inventory", "get 1 stick", "craft 1 torch using 1 stick"] * length)[:length]
        steps = []
        for action in actions:
            result = await env.step(action)
            steps.append(Step(f"I will {action}.", action, result.observation, result.reward, result.done))
        paths.append(Trajectory(task=task, instruction=env.instruction, steps=tuple(steps), reward=0.0))
    return paths


async def main(quick: bool) -> None:
    import torch

    from core.llm.hf import HFPolicy
    from core.llm.tiny import build_tiny_model
    from critic_service.critic import LABEL_TEXTS, judge_batched, judge_conversation, judge_prefix

    torch.set_num_threads(1)
    n_paths, length = (2, 20) if quick else (6, 20)
    paths = await build_paths(n_paths, length)
    corpus = [judge_conversation(p, len(p.steps) - 1) for p in paths]
    texts = [m.content for conv in corpus for m in conv] * 4
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_tiny_model(
            Path(tmp) / "tiny", texts, hidden=128 if quick else 256, layers=2 if quick else 4
        )
        policy = HFPolicy.from_folder(folder, device="cpu")
        steps = list(range(length))
        await judge_prefix(policy, paths[0], steps[:2], early_exit=False)  # warm-up

        ours_t = naive_t = port_t = 0.0
        ours_tok = naive_tok = port_tok = 0
        for path in paths:
            start = time.perf_counter()
            got, tokens = await judge_prefix(policy, path, steps, early_exit=False, reuse=True)
            ours_t += time.perf_counter() - start
            ours_tok += tokens
            start = time.perf_counter()
            base, tokens = await judge_prefix(policy, path, steps, early_exit=False, reuse=False)
            naive_t += time.perf_counter() - start
            naive_tok += tokens
            start = time.perf_counter()
            for step in steps:
                _, used = await judge_batched(policy, path, [step])
                port_tok += used
            port_t += time.perf_counter() - start
            assert [v.label for v in got] == [v.label for v in base], "prefix reuse changed a verdict"
        assert len(LABEL_TEXTS) == 3
        for metric, ours, baseline, unit in (
            (f"critic_tokens_{length}step_prefix_vs_naive", ours_tok, naive_tok, "tokens"),
            (f"critic_time_{length}step_prefix_vs_naive", ours_t, naive_t, "s"),
            (f"critic_tokens_{length}step_prefix_vs_score_labels_per_step", ours_tok, port_tok, "tokens"),
            (f"critic_time_{length}step_prefix_vs_score_labels_per_step", ours_t, port_t, "s"),
        ):
            ratio = baseline / ours if ours else float("inf")
            print(json.dumps({"metric": metric, "ours": round(ours, 4), "baseline": round(baseline, 4),
                              "unit": unit, "ratio": round(ratio, 2)}))  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 paths on a smaller model (< 1 minute)")
    asyncio.run(main(parser.parse_args().quick))
