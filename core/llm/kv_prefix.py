"""Owns the hf backend's prefix cache: the KV states of prompt prefixes, kept across calls in
fixed-size token blocks, so that a conversation which grew by a turn (an episode's next step, a
search node's child, the critic's next judged step) prefills only what is new.

Exactness. With the cache on, a prompt is ALWAYS prefilled block by block at the same boundaries
(tokens ``[0, B)``, ``[B, 2B)``, ... then the tail after the last full block), whether its blocks are
cached, evicted or never seen. A block's keys and values depend only on the tokens up to its end,
and a stored block holds exactly the tensors that computation produced, so a prompt's logits are the
same bit for bit on a hit or a miss, in any call order, with any other traffic. The batch-invariance
rule of ``core.llm.hf`` therefore still holds; only the first prefill of a long prompt costs one
forward pass per block instead of one in all.

Keys. A block is keyed by (its parent block's id, its token ids): a lookup compares tokens exactly,
so two prompts share a block only when they share every token up to its end. Least recently used
blocks are dropped past a byte budget (a dropped parent makes its children unreachable; they age
out in turn).

Thread-safe: the backend's decode threads (core/llm/hf.py) look up and store blocks at once.

Only plain attention caches qualify (``DynamicCache`` of full-attention layers holding one tensor of
keys and one of values per layer); ``PrefixCache.supports`` says whether a model's cache does, and
the backend turns the cache off for one that does not (sliding windows, recurrent states).
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

ROOT = 0  # the parent id of a prompt's first block


@dataclass(frozen=True)
class Block:
    """One cached block: its id, and per layer the (keys, values) of its tokens, [1, heads, B, dim]."""

    id: int
    layers: tuple[tuple[Any, Any], ...]
    nbytes: int


@dataclass
class PrefixCacheStats:
    """Counters a benchmark or log line can show: tokens served from the cache vs. computed."""

    lookups: int = 0
    hit_tokens: int = 0
    computed_tokens: int = 0
    stored_blocks: int = 0
    evicted_blocks: int = 0


def layer_tensors(cache: Any) -> list[tuple[Any, Any]] | None:
    """Each layer's (keys, values) of a transformers cache, or None when it is not a plain one."""
    layers = getattr(cache, "layers", None)
    if layers is None:
        return None
    out = []
    for layer in layers:
        if type(layer).__name__ != "DynamicLayer" or getattr(layer, "is_sliding", False):
            return None
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if keys is None or values is None or keys.dim() != 4:
            return None
        out.append((keys, values))
    return out


class PrefixCache:
    """Blocks of ``block_tokens`` tokens' KV states, LRU-evicted past ``max_bytes``."""

    def __init__(self, block_tokens: int = 64, max_bytes: int = 512 << 20) -> None:
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.block_tokens = block_tokens
        self.max_bytes = max_bytes
        self.bytes = 0
        self.stats = PrefixCacheStats()
        self._blocks: OrderedDict[tuple[int, tuple[int, ...]], Block] = OrderedDict()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._blocks)

    @staticmethod
    def supports(cache: Any, expected_tokens: int) -> bool:
        """Whether ``cache`` (after a forward pass over ``expected_tokens`` tokens) can be cut into blocks."""
        tensors = layer_tensors(cache)
        return bool(tensors) and all(k.shape[-2] == expected_tokens for k, _ in tensors or [])

    def full_blocks(self, length: int) -> int:
        """How many full blocks precede a prompt's last token (the last token's logits are always
        computed in the tail pass, so a prompt of exactly k blocks has k - 1 full ones before its tail)."""
        return (length - 1) // self.block_tokens if length > 0 else 0

    def lookup(self, tokens: list[int]) -> list[Block]:
        """The cached blocks that start ``tokens``, in order (stops at the first miss)."""
        chain: list[Block] = []
        parent = ROOT
        size = self.block_tokens
        with self._lock:
            for index in range(self.full_blocks(len(tokens))):
                key = (parent, tuple(tokens[index * size : (index + 1) * size]))
                block = self._blocks.get(key)
                if block is None:
                    break
                self._blocks.move_to_end(key)
                chain.append(block)
                parent = block.id
            self.stats.lookups += 1
            self.stats.hit_tokens += len(chain) * size
        return chain

    def count_computed(self, tokens: int) -> None:
        """Count ``tokens`` prefilled by the model (not served from the cache)."""
        with self._lock:
            self.stats.computed_tokens += tokens

    def store(self, parent: int, tokens: list[int], cache: Any, start: int) -> int:
        """Keep the KV states of ``tokens`` (positions ``start`` .. ``start + B`` of ``cache``) as the
        child of block ``parent``; returns the block's id (the next block's parent)."""
        if len(tokens) != self.block_tokens:
            raise ValueError(f"a block holds {self.block_tokens} tokens, got {len(tokens)}")
        key = (parent, tuple(tokens))
        with self._lock:
            known = self._blocks.get(key)
            if known is not None:
                self._blocks.move_to_end(key)
                return known.id
        tensors = layer_tensors(cache)
        if tensors is None:
            raise ValueError("the cache is not a plain attention cache (PrefixCache.supports)")
        end = start + self.block_tokens
        layers = tuple(
            (keys[:, :, start:end].clone(), values[:, :, start:end].clone()) for keys, values in tensors
        )
        nbytes = sum(k.element_size() * k.nelement() + v.element_size() * v.nelement() for k, v in layers)
        with self._lock:
            known = self._blocks.get(key)  # another thread stored it meanwhile: the same tensors
            if known is not None:
                self._blocks.move_to_end(key)
                return known.id
            block = Block(next(self._ids), layers, nbytes)
            if nbytes > self.max_bytes:
                return block.id  # too big to keep: its children will simply miss
            self._blocks[key] = block
            self.bytes += nbytes
            self.stats.stored_blocks += 1
            while self.bytes > self.max_bytes:
                _, dropped = self._blocks.popitem(last=False)
                self.bytes -= dropped.nbytes
                self.stats.evicted_blocks += 1
            return block.id

    def clear(self) -> None:
        with self._lock:
            self._blocks.clear()
            self.bytes = 0
