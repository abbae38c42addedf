"""Owns API key material: the key format, generation, salted hashing and verification.

A key looks like ``agr_<prefix>_<secret>``: ``prefix`` (12 hex characters) is public, stored in
clear and indexed so a request finds its row in one lookup; ``secret`` (43 url-safe characters, 256
random bits) is never stored. What is stored is ``scrypt(secret, salt)`` with a random 16-byte salt
per key. Keys are shown to the caller exactly once, when issued.

scrypt is deliberately slow; a process-local cache of (key id, SHA-256 of the presented key) pairs
that already verified saves repeating it on every request. The row (and so revocation and scopes) is
still read on every request; the cache only skips re-hashing a secret known to match. A presented
key whose prefix is unknown or revoked is hashed anyway (``reject_at_full_cost``), so a wrong secret
costs the same to reject whether or not its prefix exists.

``VerifiedKeys`` is the capture proxy's cache of whole verified callers (no row read at all for a
while): entries expire after their TTL, and a key revoked in the same process is forgotten at once
(``forget``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from typing import Generic, TypeVar

KEY_PATTERN = re.compile(r"^agr_([0-9a-f]{12})_([A-Za-z0-9_-]{20,128})$")

# scrypt cost: n=2**14, r=8 -> 16 MiB and a few tens of milliseconds per hash.
_SCRYPT_N = 2**14
_SCRYPT_R = 8
_SCRYPT_P = 1
_SCRYPT_LEN = 32

SCOPES = ("read", "ingest", "run", "review", "admin")


@dataclass(frozen=True)
class IssuedKey:
    """A freshly generated key: the full text (shown once) and what is stored about it."""

    key: str
    prefix: str
    salt: str
    key_hash: str


@dataclass(frozen=True)
class ParsedKey:
    prefix: str
    secret: str


def hash_secret(secret: str, salt_hex: str) -> str:
    """scrypt of the secret under the given hex salt, as hex."""
    digest = hashlib.scrypt(
        secret.encode(),
        salt=bytes.fromhex(salt_hex),
        n=_SCRYPT_N,
        r=_SCRYPT_R,
        p=_SCRYPT_P,
        maxmem=64 * 1024 * 1024,
        dklen=_SCRYPT_LEN,
    )
    return digest.hex()


def generate_key() -> IssuedKey:
    prefix = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    return IssuedKey(
        key=f"agr_{prefix}_{secret}", prefix=prefix, salt=salt, key_hash=hash_secret(secret, salt)
    )


def parse_key(text: str) -> ParsedKey | None:
    """Split a presented key into prefix and secret; None when it is not in the key format."""
    match = KEY_PATTERN.match(text.strip())
    if match is None:
        return None
    return ParsedKey(prefix=match.group(1), secret=match.group(2))


class KeyVerifier:
    """Checks presented secrets against stored hashes, remembering keys that already matched."""

    def __init__(self, max_cached: int = 4096) -> None:
        self._verified: dict[tuple[str, str], None] = {}
        self._max_cached = max_cached

    @staticmethod
    def _cache_key(key_id: str, presented: ParsedKey, key_hash: str) -> tuple[str, str]:
        fingerprint = hashlib.sha256(f"{presented.prefix}:{presented.secret}:{key_hash}".encode()).hexdigest()
        return key_id, fingerprint

    def known(self, key_id: str, presented: ParsedKey, key_hash: str) -> bool:
        """Whether ``presented`` already verified against this key (no hashing: a cache look-up)."""
        return self._cache_key(key_id, presented, key_hash) in self._verified

    def verify(self, key_id: str, presented: ParsedKey, salt: str, key_hash: str) -> bool:
        cache_key = self._cache_key(key_id, presented, key_hash)
        if cache_key in self._verified:
            return True
        ok = hmac.compare_digest(hash_secret(presented.secret, salt), key_hash)
        if ok:
            if len(self._verified) >= self._max_cached:
                self._verified.pop(next(iter(self._verified)))
            self._verified[cache_key] = None
        return ok


Caller = TypeVar("Caller")


class VerifiedKeys(Generic[Caller]):
    """Callers verified by their presented key, each trusted until its time runs out (monotonic
    clock) or its key id is ``forget``-ten (revoked in this process). Keyed by the SHA-256 of the
    presented key, so no secret is held. Bounded: past ``max_entries`` the oldest entry goes."""

    def __init__(self, max_entries: int = 4096) -> None:
        self._by_digest: dict[str, tuple[str | None, Caller, float]] = {}
        self._max_entries = max_entries

    @staticmethod
    def digest(presented: str) -> str:
        return hashlib.sha256(presented.encode()).hexdigest()

    def get(self, digest: str) -> Caller | None:
        """The caller cached under ``digest`` while its time runs; None otherwise."""
        found = self._by_digest.get(digest)
        if found is None:
            return None
        if found[2] <= time.monotonic():
            self._by_digest.pop(digest, None)
            return None
        return found[1]

    def put(self, digest: str, key_id: str | None, caller: Caller, ttl_s: float) -> None:
        if ttl_s <= 0:
            return
        self._by_digest.pop(digest, None)
        while len(self._by_digest) >= self._max_entries:
            self._by_digest.pop(next(iter(self._by_digest)))
        self._by_digest[digest] = (key_id, caller, time.monotonic() + ttl_s)

    def forget(self, key_id: str) -> None:
        """Drop every cached caller of ``key_id`` (it was revoked)."""
        for digest in [d for d, (kid, _c, _t) in self._by_digest.items() if kid == key_id]:
            del self._by_digest[digest]


# A fixed salt and hash nothing matches: verifying a presented secret against them costs exactly
# what verifying it against a real key costs, so an unknown (or revoked) prefix is not cheaper to
# reject than a known one (no prefix oracle).
_DUMMY_SALT = "00" * 16
_DUMMY_HASH = "ff" * _SCRYPT_LEN


def reject_at_full_cost(presented: ParsedKey) -> bool:
    """Hash ``presented`` against a key that cannot match; always False, at the cost of a real check."""
    return hmac.compare_digest(hash_secret(presented.secret, _DUMMY_SALT), _DUMMY_HASH)


def is_admin_key(presented: str, admin_key: str | None) -> bool:
    """Constant-time comparison with the bootstrap admin key (AGENTR_ADMIN_KEY)."""
    if not admin_key:
        return False
    return hmac.compare_digest(presented.strip().encode(), admin_key.encode())
