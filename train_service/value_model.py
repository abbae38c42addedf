"""Owns ArCHer's utterance-level critic: the encoder, double Q / V heads, targets, save and load.

Encoder (our choice, documented): a SEPARATE copy of the actor's own transformer body
(``AutoModel.from_pretrained`` of the actor's checkpoint: for a causal LM, the decoder stack
without its LM head), mean-pooled over the non-padding tokens. It starts from the actor's
pretrained weights, so it already reads the environment's text and the chat template, and it is
trained by the critic's loss alone (the actor's gradients never touch it, nor the critic's the
actor). ArCHer itself uses a separate RoBERTa; this keeps the critic self-contained offline
(no second model family to ship) and as small as the actor.

* state s: the history rendered with the model's chat template (``state_text``), cut from the
  LEFT to ``max_state_tokens`` (the most recent turns matter most);
* action a: the assistant turn's text, cut from the right to ``max_action_tokens``;
* ``V_i(s) = MLP_vi(enc(s))`` and ``Q_i(s, a) = MLP_qi([enc(s); enc(a)])`` for i = 1, 2 (double
  heads; ArCHer's MLPs: two hidden ReLU layers of ``head_hidden`` units);
* the target critic is a frozen deep copy moved by Polyak averaging,
  ``target <- (1 - tau) * target + tau * online`` (``soft_update``).

Saved as ``<checkpoint>/critic/``: ``critic.safetensors`` (encoder + heads) and ``critic.json``
(encoder config, head sizes, token limits); ``load_critic`` rebuilds it with no network access.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from core.domain.trajectory import Message
from core.llm.chat_template import hf_messages

CRITIC_DIR = "critic"
CRITIC_WEIGHTS = "critic.safetensors"
CRITIC_META = "critic.json"


@dataclass(frozen=True)
class CriticShape:
    """head_hidden: units of each head's two hidden layers. max_state_tokens / max_action_tokens:
    token limits of the encoder's inputs (left / right truncation)."""

    head_hidden: int = 1024
    max_state_tokens: int = 512
    max_action_tokens: int = 64


def _mlp(inputs: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1)
    )


class UtteranceCritic(nn.Module):  # type: ignore[misc]
    """Double Q(s, a) and V(s) over a transformer encoder (see the module docstring)."""

    def __init__(self, encoder: Any, shape: CriticShape) -> None:
        super().__init__()
        self.encoder = encoder
        self.shape = shape
        width = int(encoder.config.hidden_size)
        self.q1, self.q2 = _mlp(2 * width, shape.head_hidden), _mlp(2 * width, shape.head_hidden)
        self.v1, self.v2 = _mlp(width, shape.head_hidden), _mlp(width, shape.head_hidden)

    def encode(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)

    def values(self, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.encode(state["input_ids"], state["attention_mask"])
        return self.v1(s).squeeze(-1), self.v2(s).squeeze(-1)

    def forward(
        self, state: dict[str, torch.Tensor], action: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(q1, q2, v1, v2), each [B]."""
        s = self.encode(state["input_ids"], state["attention_mask"])
        a = self.encode(action["input_ids"], action["attention_mask"])
        sa = torch.cat([s, a], dim=-1)
        return (
            self.q1(sa).squeeze(-1),
            self.q2(sa).squeeze(-1),
            self.v1(s).squeeze(-1),
            self.v2(s).squeeze(-1),
        )


def build_critic(model_path: str | Path, shape: CriticShape | None = None, seed: int = 0) -> UtteranceCritic:
    """A fresh critic whose encoder starts from the actor's transformer body at ``model_path``."""
    from transformers import AutoModel

    from core.llm.hf_folder import load_pretrained

    encoder = load_pretrained(AutoModel, model_path, dtype=torch.float32)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return UtteranceCritic(encoder, shape or CriticShape())


def target_copy(critic: UtteranceCritic) -> UtteranceCritic:
    """A frozen deep copy (the target critic)."""
    target = copy.deepcopy(critic)
    for p in target.parameters():
        p.requires_grad_(False)
    return target


@torch.no_grad()
def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """Polyak averaging: every target parameter becomes (1 - tau) * itself + tau * the online one."""
    for t, o in zip(target.parameters(), online.parameters(), strict=True):
        t.mul_(1.0 - tau).add_(o.detach(), alpha=tau)


def state_text(tokenizer: Any, messages: Sequence[Message]) -> str:
    """A state rendered with the model's chat template (no generation prompt)."""
    return str(tokenizer.apply_chat_template(hf_messages(messages), tokenize=False))


def encode_texts(
    tokenizer: Any, texts: Sequence[str], max_tokens: int, *, left: bool, device: Any = "cpu"
) -> dict[str, torch.Tensor]:
    """Right-padded ids + mask; over-long texts lose their start (``left``) or their end."""
    rows = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] or [tokenizer.pad_token_id or 0]
        rows.append(ids[-max_tokens:] if left else ids[:max_tokens])
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


def save_critic(critic: UtteranceCritic, folder: str | Path) -> Path:
    from safetensors.torch import save_file

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in critic.state_dict().items()}
    save_file(state, str(out / CRITIC_WEIGHTS))
    meta = {
        "shape": asdict(critic.shape),
        "encoder_config": critic.encoder.config.to_dict(),
        "format_version": 1,
    }
    (out / CRITIC_META).write_text(json.dumps(meta, indent=1, sort_keys=True))
    return out


def has_critic(checkpoint: str | Path) -> bool:
    folder = Path(checkpoint) / CRITIC_DIR
    return (folder / CRITIC_WEIGHTS).is_file() and (folder / CRITIC_META).is_file()


def load_critic(checkpoint: str | Path, device: Any = "cpu") -> UtteranceCritic:
    """The critic saved in ``<checkpoint>/critic/`` (ValueError naming the folder when there is none)."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModel

    folder = Path(checkpoint) / CRITIC_DIR
    if not has_critic(checkpoint):
        raise ValueError(
            f"{checkpoint} has no ArCHer critic ({folder}/{CRITIC_WEIGHTS}): the value critic needs a "
            "model trained with train.method 'archer'"
        )
    meta = json.loads((folder / CRITIC_META).read_text())
    enc_cfg = dict(meta["encoder_config"])
    config = AutoConfig.for_model(enc_cfg.pop("model_type"), **enc_cfg)
    encoder = AutoModel.from_config(config)
    critic = UtteranceCritic(encoder, CriticShape(**meta["shape"]))
    critic.load_state_dict(load_file(str(folder / CRITIC_WEIGHTS)))
    critic.eval()
    return critic.to(device)
