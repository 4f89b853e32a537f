"""Paged KV-cache bookkeeping: fixed-size blocks, reference counts, prefix cache.

A block that is full and computed gets a hash chained from its predecessor's,
so two sequences that share a prompt prefix share its blocks. Freed blocks
keep their hash and contents until they are reused (evicted in LRU order), so
a later request with the same prefix can still hit them.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from engine.sequence import Sequence


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    # (parent hash, token ids) identifies the block's contents exactly; its
    # hash is the key in the prefix cache.
    key: tuple[int | None, tuple[int, ...]] | None = None


@dataclass
class PrefixCacheStats:
    queries: int = 0        # prompt blocks looked up
    hits: int = 0           # of those, found cached
    hit_tokens: int = 0     # tokens not recomputed thanks to hits


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        if num_blocks < 1:
            raise ValueError("the KV cache needs at least one block")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.cached: dict[int, int] = {}          # content hash -> block id
        self.stats = PrefixCacheStats()

    @property
    def num_free_blocks(self) -> int:
        return len(self.free)

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        total = seq.num_computed_tokens + num_new_tokens
        return max(0, -(-total // self.block_size) - len(seq.block_table))

    def can_allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.blocks_needed(seq, num_new_tokens) <= self.num_free_blocks

    def allocate(self, seq: Sequence, num_new_tokens: int) -> None:
        for _ in range(self.blocks_needed(seq, num_new_tokens)):
            seq.block_table.append(self._take_free_block())

    def acquire_cached_prefix(self, seq: Sequence) -> int:
        """Point a fresh sequence's first blocks at cached ones; return tokens hit.

        At least one prompt token is always left to compute, so the step that
        finishes the prompt produces logits for the first output token.
        """
        assert not seq.block_table and seq.num_computed_tokens == 0
        if not self.enable_prefix_caching:
            return 0
        bs = self.block_size
        parent: int | None = None
        for i in range((seq.num_tokens - 1) // bs):
            key = (parent, tuple(seq.token_ids[i * bs:(i + 1) * bs]))
            h = hash(key)
            self.stats.queries += 1
            block_id = self.cached.get(h)
            if block_id is None or self.blocks[block_id].key != key:
                break
            self.stats.hits += 1
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self.free[block_id]
            block.ref_count += 1
            seq.block_table.append(block_id)
            seq.block_hashes.append(h)
            parent = h
        seq.num_computed_tokens = len(seq.block_table) * bs
        self.stats.hit_tokens += seq.num_computed_tokens
        return seq.num_computed_tokens

    def register_computed_blocks(self, seq: Sequence) -> None:
        """Publish the sequence's newly completed full blocks to the prefix cache."""
        if not self.enable_prefix_caching:
            return
        bs = self.block_size
        for i in range(len(seq.block_hashes), seq.num_computed_tokens // bs):
            parent = seq.block_hashes[-1] if seq.block_hashes else None
            key = (parent, tuple(seq.token_ids[i * bs:(i + 1) * bs]))
            h = hash(key)
            block = self.blocks[seq.block_table[i]]
            if block.key is None:
                block.key = key
                self.cached.setdefault(h, block.block_id)
            seq.block_hashes.append(h)

    def release(self, seq: Sequence) -> None:
        # Tail blocks go back first so that they are evicted before the shared
        # prefix blocks at the head of the table.
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free[block_id] = None
        seq.block_table = []
        seq.block_hashes = []
        seq.num_computed_tokens = 0

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix, so the next prompts compute all their blocks.

        Only while no sequence holds a block (as vLLM's reset_prefix_cache): a running
        sequence's blocks are its own state, not cache. Returns whether it reset."""
        if len(self.free) != self.num_blocks:
            return False
        for block in self.blocks:
            block.key = None
        self.cached.clear()
        return True

    def _take_free_block(self) -> int:
        block_id, _ = self.free.popitem(last=False)
        block = self.blocks[block_id]
        if block.key is not None:
            h = hash(block.key)
            if self.cached.get(h) == block_id:
                del self.cached[h]
            block.key = None
        block.ref_count = 1
        return block_id
