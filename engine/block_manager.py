"""Paged KV-cache bookkeeping: fixed-size blocks, reference counts, prefix cache.

A block that is full and computed gets a hash chained from its predecessor's,
so two sequences that share a prompt prefix share its blocks. Freed blocks
keep their hash and contents until they are reused (evicted in LRU order), so
a later request with the same prefix can still hit them.
"""
from __future__ import annotations

import struct
from collections import OrderedDict
from dataclasses import dataclass
from itertools import islice
from typing import Iterator

import numpy as np


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    # Its parent's hash (8 bytes; none for a first block), then its token ids (int32):
    # identifies the block's contents exactly; its hash is the key in the prefix cache.
    # Bytes, which the garbage collector does not track: a tuple key for every block of
    # a long prefill set off collections.
    key: bytes | None = None


@dataclass
class PrefixCacheStats:
    queries: int = 0        # prompt blocks looked up
    hits: int = 0           # of those, found cached
    hit_tokens: int = 0     # tokens not recomputed thanks to hits


class BlockManager:
    """Owns the KV blocks: who holds which (a block table per request id) and what
    each cached one contains. Requests are named by id; token ids are passed in."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        if num_blocks < 1:
            raise ValueError("the KV cache needs at least one block")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.cached: dict[int, int] = {}          # content hash -> block id
        self.tables: dict[int, list[int]] = {}    # request id -> its blocks, in order
        self.hashes: dict[int, list[int]] = {}    # request id -> hashes of its published full blocks
        self.stats = PrefixCacheStats()

    @property
    def num_free_blocks(self) -> int:
        return len(self.free)

    def block_table(self, request_id: int) -> list[int]:
        return self.tables.get(request_id, [])

    def blocks_needed(self, request_id: int, num_tokens: int) -> int:
        """New blocks the request needs to hold `num_tokens` tokens in all."""
        return max(0, -(-num_tokens // self.block_size) - len(self.block_table(request_id)))

    def can_allocate(self, request_id: int, num_tokens: int) -> bool:
        return self.blocks_needed(request_id, num_tokens) <= self.num_free_blocks

    def allocate(self, request_id: int, num_tokens: int) -> list[int]:
        """Grow the request's table to hold `num_tokens` tokens; returns the new block ids."""
        return self.grow(request_id, self.blocks_needed(request_id, num_tokens))

    def grow(self, request_id: int, num_blocks: int) -> list[int]:
        """Append `num_blocks` free blocks to the request's table (there must be as many free);
        returns their ids."""
        # The least recently freed first; a block that still holds a cached prefix leaves
        # the cache. One loop here, not a call a block: a long prompt takes hundreds (the
        # ids taken in one slice, then deleted, is half the time of a popitem a block).
        free, blocks, cached = self.free, self.blocks, self.cached
        if num_blocks > len(free):
            raise RuntimeError(f"{num_blocks} KV blocks wanted, {len(free)} free")
        new = list(islice(free, num_blocks))
        for block_id in new:
            del free[block_id]
            block = blocks[block_id]
            if block.key is not None:
                h = hash(block.key)
                if cached.get(h) == block_id:
                    del cached[h]
                block.key = None
            block.ref_count = 1
        self.tables.setdefault(request_id, []).extend(new)
        return new

    def acquire_cached_prefix(self, request_id: int, token_ids: list[int] | np.ndarray) -> int:
        """Point a request without blocks at the cached blocks of its prefix; return tokens hit.

        At least one token is always left to compute, so the step that finishes the
        prompt produces logits for the first output token.
        """
        assert request_id not in self.tables
        table: list[int] = []
        hashes: list[int] = []
        self.tables[request_id], self.hashes[request_id] = table, hashes
        if not self.enable_prefix_caching:
            return 0
        for key, h in self._block_keys(token_ids, None, 0, (len(token_ids) - 1) // self.block_size):
            self.stats.queries += 1
            block_id = self.cached.get(h)
            if block_id is None or self.blocks[block_id].key != key:
                break
            self.stats.hits += 1
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self.free[block_id]
            block.ref_count += 1
            table.append(block_id)
            hashes.append(h)
        hit = len(table) * self.block_size
        self.stats.hit_tokens += hit
        return hit

    def publish_full_blocks(self, request_id: int, token_ids: list[int] | np.ndarray, num_computed: int) -> None:
        """Publish the request's full blocks among its first `num_computed` tokens, whose
        values are `token_ids` (all of them known: a block is hashed by its contents)."""
        if not self.enable_prefix_caching:
            return
        assert num_computed <= len(token_ids)
        table, hashes = self.tables[request_id], self.hashes.setdefault(request_id, [])
        first = len(hashes)
        keys = self._block_keys(token_ids, hashes[-1] if hashes else None, first, num_computed // self.block_size)
        for block_id, (key, h) in zip(table[first:], keys):
            block = self.blocks[block_id]
            if block.key is None:
                block.key = key
                self.cached.setdefault(h, block_id)
            hashes.append(h)

    def _block_keys(self, token_ids: list[int] | np.ndarray, parent: int | None, first: int,
                    last: int) -> Iterator[tuple[bytes, int]]:
        """Key and hash of each of blocks [first, last) of `token_ids` (a list, or an int32 array:
        then no Python loop over its tokens), chained from `parent`, the hash of block first - 1."""
        bs = self.block_size
        tokens = token_ids[first * bs:max(first, last) * bs]
        # One conversion to int32 bytes (struct packs a list's few tokens faster than numpy
        # converts them); the blocks are slices of it.
        data = (np.asarray(tokens, np.int32).tobytes() if isinstance(tokens, np.ndarray)
                else struct.pack(f"={len(tokens)}i", *tokens))
        width = bs * 4
        for start in range(0, len(data), width):
            parent_bytes = b"" if parent is None else parent.to_bytes(8, "little", signed=True)
            key = parent_bytes + data[start:start + width]
            parent = hash(key)
            yield key, parent

    def release(self, request_id: int) -> None:
        # Tail blocks go back first so that they are evicted before the shared
        # prefix blocks at the head of the table.
        for block_id in reversed(self.tables.pop(request_id, [])):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free[block_id] = None
        self.hashes.pop(request_id, None)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix, so the next prompts compute all their blocks.

        Only while no request holds a block (as vLLM's reset_prefix_cache): a running
        request's blocks are its own state, not cache. Returns whether it reset."""
        if len(self.free) != self.num_blocks:
            return False
        for block in self.blocks:
            block.key = None
        self.cached.clear()
        return True
