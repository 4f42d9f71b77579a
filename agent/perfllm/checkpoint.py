"""The agent's files: torch objects written atomically, and the embedding they belong to.

A training directory holds `checkpoint.pt`, everything a run needs to go on exactly where it
stopped, and `policy.pt`, the online network alone, which is what playing needs (see
`agent.perfllm.train` for the whole layout). Both record the embedding model's identity
(`Embedder.identity`): a network trained on one model's vectors means nothing on another's, so
loading with another model is refused with the names of both.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from .embed import DEFAULT_MODEL, Embedding, shared
from .learner import Learner, LearnerConfig

FORMAT = 2  # 2: actions are embedded descriptions of moves (agent.perfllm.actions)
CHECKPOINT = "checkpoint.pt"
POLICY = "policy.pt"
# The agent that comes with the project (trained on the library's small kernels, less some held
# out: see its README), used wherever no checkpoint is named.
SHIPPED = Path(__file__).resolve().parent / "trained"
_COMPARED = ("dim", "max_tokens", "fingerprint")


class EmbeddingMismatch(ValueError):
    """A checkpoint trained with another embedding model than the one given."""


def save_atomically(obj: Any, path: Path) -> None:
    """torch.save `obj` to `path` so that a crash leaves the old file or the new one."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        torch.save(obj, temporary)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load(path: Path) -> dict[str, Any]:
    """A file written by `save_atomically` for the agent, checked for its format."""
    if not path.is_file():
        raise FileNotFoundError(f"no agent checkpoint at {path}")
    saved = torch.load(path, weights_only=True)
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        raise ValueError(f"{path} is not an agent checkpoint of format {FORMAT}")
    return saved


def check_embedding(saved: dict[str, Any], embedder: Embedding, path: Path) -> None:
    """Refuse `embedder` unless it is the model `saved` was trained with."""
    trained, given = saved["embedding"], embedder.identity
    if any(trained.get(k) != given.get(k) for k in _COMPARED):
        raise EmbeddingMismatch(
            f"{path} was trained with the embedding model {_describe(trained)}, not {_describe(given)}: "
            f"use that model (model_dir={trained.get('model_dir')!r}) or train another agent")


def _describe(identity: dict[str, Any]) -> str:
    return (f"`{identity.get('name')}` (dimension {identity.get('dim')}, {identity.get('max_tokens')} tokens a window, "
            f"fingerprint {identity.get('fingerprint')})")


def policy_state(learner: Learner, embedder: Embedding) -> dict[str, Any]:
    """What `policy.pt` holds: the online network, its configuration and the embedding's identity."""
    return {"format": FORMAT, "embedding": embedder.identity, "dim": learner.dim, "action_dim": learner.action_dim,
            "config": learner.config.to_json(), "online": learner.online.state_dict()}


def load_policy(path: Path, embedder: Embedding | None = None) -> tuple[Learner, Embedding]:
    """The trained network of `path` (a training directory or a policy file) and the embedder it
    plays with: `embedder`, checked, or else the model it was trained with."""
    file = path / POLICY if path.is_dir() else path
    saved = load(file)
    if embedder is None:
        trained = saved["embedding"]
        directory = trained.get("model_dir")
        local = trained.get("name") != DEFAULT_MODEL and directory is not None and Path(directory).is_dir()
        embedder = shared(directory if local else None)
    check_embedding(saved, embedder, file)
    learner = Learner(int(saved["dim"]), LearnerConfig.from_json(saved["config"]), action_dim=int(saved["action_dim"]))
    learner.online.load_state_dict(saved["online"])
    learner.target.load_state_dict(saved["online"])  # a search that goes on learning starts from it
    return learner, embedder
