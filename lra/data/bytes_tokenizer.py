"""Byte-level tokens, as LRA's text tasks use them (tfds ``ByteTextEncoder``).

Byte b is token ``b + 1``, 0 is padding (257 ids); a document keeps its first ``max_len`` bytes, as in LRA."""

from __future__ import annotations

import numpy as np

from lra.data.types import PAD_ID

VOCAB_SIZE = 257  # 256 byte values + padding
TOKEN_DTYPE = np.uint16


def encode_into(doc: bytes, row: np.ndarray) -> int:
    """Write the tokens of ``doc`` into ``row`` (length max_len, zero-filled); return the length."""
    n = min(len(doc), row.shape[-1])
    row[:n] = np.frombuffer(doc, np.uint8, count=n)
    row[:n] += 1
    row[n:] = PAD_ID
    return n


def encode(docs: list[bytes], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens (N x max_len, uint16) and lengths (N, int32) of byte strings."""
    tokens = np.zeros((len(docs), max_len), TOKEN_DTYPE)
    lengths = np.array([encode_into(d, tokens[i]) for i, d in enumerate(docs)], np.int32)
    return tokens, lengths.reshape(len(docs))


def decode(tokens: np.ndarray) -> bytes:
    """The bytes of one token row (padding dropped): the inverse of :func:`encode`."""
    tokens = np.asarray(tokens)
    return (tokens[tokens != PAD_ID] - 1).astype(np.uint8).tobytes()
