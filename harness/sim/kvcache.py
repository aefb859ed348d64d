"""Paged KV-cache block pool with prefix caching, as vLLM's block manager keeps it.

Blocks are counted, not stored: a request holds `private` blocks (its own) and references to
shared, hash-named blocks of a prompt prefix. A shared block whose last reference is dropped
stays cached but evictable (LRU), so a later request with the same prefix can reuse it; it is
evicted only when a new allocation needs the space. Pure bookkeeping, no clock, no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class BlockPool:
    """`num_blocks` KV blocks; `allocatable` counts free blocks plus evictable cached ones."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.private_used = 0
        self._refs: dict[int, int] = {}  # block hash -> number of requests using it
        self._evictable: OrderedDict[int, None] = OrderedDict()  # refcount 0, LRU first

    @property
    def free(self) -> int:
        """Blocks holding nothing at all."""
        return self.num_blocks - self.private_used - len(self._refs)

    @property
    def allocatable(self) -> int:
        return self.free + len(self._evictable)

    @property
    def used(self) -> int:
        """Blocks some request holds (what vLLM's kv_cache_usage_perc counts)."""
        return self.private_used + len(self._refs) - len(self._evictable)

    @property
    def cached(self) -> int:
        return len(self._refs)

    def allocate(self, n: int) -> bool:
        """Take `n` private blocks, evicting cached ones if needed. False (and no change) if
        there is not enough room."""
        if n <= 0:
            return True
        if n > self.allocatable:
            return False
        for _ in range(max(0, n - self.free)):
            h, _ = self._evictable.popitem(last=False)
            del self._refs[h]
        self.private_used += n
        return True

    def release(self, private: int, shared: Sequence[int]) -> None:
        """Give back a request's private blocks and drop its references to shared ones."""
        self.private_used -= private
        for h in reversed(shared):  # tail blocks first: they are the least reusable
            left = self._refs[h] - 1
            self._refs[h] = left
            if left == 0:
                self._evictable[h] = None

    def lookup(self, hashes: Sequence[int], limit: int) -> int:
        """How many leading blocks of `hashes` (at most `limit`) are cached."""
        hits = 0
        for h in hashes[:limit]:
            if h not in self._refs:
                break
            hits += 1
        return hits

    def reset(self) -> bool:
        """Forget every cached block, as vLLM's `reset_prefix_cache`: only when no request holds
        a block (True); otherwise nothing changes (False)."""
        if self.used:
            return False
        self._refs.clear()
        self._evictable.clear()
        return True

    def evictable_among(self, hashes: Sequence[int]) -> int:
        return sum(1 for h in hashes if h in self._evictable)

    def acquire(self, hashes: Sequence[int]) -> None:
        """Reference cached blocks found by `lookup` (they stop being evictable)."""
        for h in hashes:
            self._refs[h] += 1
            self._evictable.pop(h, None)

    def promote(self, h: int) -> bool:
        """Turn one of the caller's private blocks, now full, into the shared block `h`.
        False if `h` is already cached (the caller keeps its private copy)."""
        if h in self._refs:
            return False
        self.private_used -= 1
        self._refs[h] = 1
        return True
