"""Small models of the families users compile (written here in the project's own words), and a trainer.

Each builder returns ``(model, batch)`` where ``batch()`` gives ``(inputs, targets)`` for one step and the
model maps ``*inputs`` to logits; `train` runs a few SGD steps and returns the losses. The shapes are tiny
(the point is coverage of the ops and the training loop, not speed). Hugging Face models come from small
configs with random weights (no downloads).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

Batch = Callable[[], tuple[tuple[Any, ...], torch.Tensor]]


# ----- vision transformer (patch embedding by conv or by linear) -----
class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool = False) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool = False) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, causal)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class LinearPatches(nn.Module):
    """Patches cut by reshapes and embedded by one Linear (no conv)."""

    def __init__(self, patch: int, chans: int, dim: int) -> None:
        super().__init__()
        self.patch = patch
        self.proj = nn.Linear(patch * patch * chans, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        p = self.patch
        x = x.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1).reshape(b, (h // p) * (w // p), -1)
        return self.proj(x)


class ConvPatches(nn.Module):
    def __init__(self, patch: int, chans: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(chans, dim, patch, stride=patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class ViT(nn.Module):
    def __init__(self, conv: bool, image: int = 8, patch: int = 4, dim: int = 16, depth: int = 1,
                 classes: int = 5) -> None:  # fmt: skip
        super().__init__()
        self.patches = (ConvPatches if conv else LinearPatches)(patch, 3, dim)
        n = (image // patch) ** 2
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*(Block(dim, 2) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patches(x)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


# ----- resnet18-shaped CNN -----
class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    """resnet18's layout (stem conv + max pool, 4 stages of 2 basic blocks, global pool, fc), narrow."""

    def __init__(self, width: int = 4, classes: int = 5) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))  # fmt: skip
        stages, cin = [], width
        for i, cout in enumerate([width, 2 * width, 4 * width, 8 * width]):
            stride = 1 if i == 0 else 2
            stages += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.stages(self.stem(x)), 1), 1))


# ----- nanoGPT-style language model -----
class NanoGPT(nn.Module):
    def __init__(self, vocab: int = 32, ctx: int = 8, dim: int = 16, depth: int = 1) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
        self.blocks = nn.Sequential(*(Block(dim, 2, causal=True) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight  # weight tying, as nanoGPT does

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.norm(self.blocks(self.tok(idx) + self.pos(pos))))


# ----- recurrent language models, EmbeddingBag -----
class RNNLM(nn.Module):
    def __init__(self, cell: str, vocab: int = 16, dim: int = 8) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(dim, dim, batch_first=True)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.emb(idx))
        return self.head(out)


class BagClassifier(nn.Module):
    def __init__(self, vocab: int = 20, dim: int = 8, classes: int = 3) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab, dim, mode="mean")
        self.fc = nn.Linear(dim, classes)

    def forward(self, idx: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.fc(self.bag(idx, offsets))


# ----- mobile / modern CNN blocks (depthwise convolutions) -----
class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expansion, 3x3 depthwise (one channel a group), 1x1 linear projection, ReLU6
    between, the shortcut when shapes allow."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int = 6) -> None:
        super().__init__()
        wide = cin * expand
        self.shortcut = stride == 1 and cin == cout
        self.layers = nn.Sequential(
            nn.Conv2d(cin, wide, 1, bias=False), nn.BatchNorm2d(wide), nn.ReLU6(),
            nn.Conv2d(wide, wide, 3, stride, 1, groups=wide, bias=False), nn.BatchNorm2d(wide), nn.ReLU6(),
            nn.Conv2d(wide, cout, 1, bias=False), nn.BatchNorm2d(cout),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.layers(x)
        return x + y if self.shortcut else y


class MobileNetV2ish(nn.Module):
    def __init__(self, width: int = 8, classes: int = 5) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU6())
        self.blocks = nn.Sequential(InvertedResidual(width, 2 * width, 2), InvertedResidual(2 * width, 2 * width, 1))
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


class ConvNeXtBlock(nn.Module):
    """ConvNeXt's block: 7x7 depthwise, LayerNorm over channels in channels-last layout, an MLP with GELU,
    a learned per-channel scale, the residual."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.scale = nn.Parameter(torch.full((dim,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.dwconv(x).permute(0, 2, 3, 1))
        return x + (self.down(F.gelu(self.up(y))) * self.scale).permute(0, 3, 1, 2)


class ConvNeXtish(nn.Module):
    def __init__(self, dim: int = 8, classes: int = 5) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, dim, 4, stride=4)
        self.stem_norm = nn.LayerNorm(dim, eps=1e-6)
        self.blocks = nn.Sequential(ConvNeXtBlock(dim), ConvNeXtBlock(dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem_norm(self.stem(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.head(self.blocks(x).mean((2, 3)))


class SqueezeExcite(nn.Module):
    """Channel gates from the globally pooled map: 1x1 reduce, SiLU, 1x1 expand, sigmoid."""

    def __init__(self, chans: int, squeezed: int) -> None:
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(chans, squeezed, 1), nn.Conv2d(squeezed, chans, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.expand(F.silu(self.reduce(F.adaptive_avg_pool2d(x, 1))))
        return x * torch.sigmoid(gate)


class MBConv(nn.Module):
    """EfficientNet's block: 1x1 expansion, depthwise 3x3, squeeze-excite, 1x1 projection, SiLU activations."""

    def __init__(self, chans: int, expand: int = 4) -> None:
        super().__init__()
        wide = chans * expand
        self.expand = nn.Sequential(nn.Conv2d(chans, wide, 1, bias=False), nn.BatchNorm2d(wide), nn.SiLU())
        self.depthwise = nn.Sequential(nn.Conv2d(wide, wide, 3, 1, 1, groups=wide, bias=False), nn.BatchNorm2d(wide),
                                       nn.SiLU())  # fmt: skip
        self.se = SqueezeExcite(wide, max(1, chans // 4))
        self.project = nn.Sequential(nn.Conv2d(wide, chans, 1, bias=False), nn.BatchNorm2d(chans))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.project(self.se(self.depthwise(self.expand(x))))


class EfficientNetish(nn.Module):
    def __init__(self, width: int = 8, classes: int = 5) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.SiLU())
        self.blocks = nn.Sequential(MBConv(width), MBConv(width))
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1).flatten(1))


# ----- builders -----
def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def images(model: nn.Module, size: int, classes: int = 5, batch: int = 2) -> tuple[nn.Module, Batch]:
    gen = _gen(1)
    return model, lambda: ((torch.randn(batch, 3, size, size, generator=gen),),
                           torch.randint(0, classes, (batch,), generator=gen))  # fmt: skip


def tokens(model: nn.Module, vocab: int, ctx: int, batch: int = 2) -> tuple[nn.Module, Batch]:
    gen = _gen(2)

    def batch_fn() -> tuple[tuple[Any, ...], torch.Tensor]:
        seq = torch.randint(0, vocab, (batch, ctx + 1), generator=gen)
        return (seq[:, :-1],), seq[:, 1:]

    return model, batch_fn


def bag() -> tuple[nn.Module, Batch]:
    gen = _gen(3)

    def batch_fn() -> tuple[tuple[Any, ...], torch.Tensor]:
        idx = torch.randint(0, 20, (10,), generator=gen)
        return (idx, torch.tensor([0, 3, 7])), torch.randint(0, 3, (3,), generator=gen)

    return BagClassifier(), batch_fn


class HFLogits(nn.Module):
    """A Hugging Face model called as its users do (keyword inputs, an attention mask) returning logits."""

    def __init__(self, model: nn.Module, mask: bool, left_pad: bool = False) -> None:
        super().__init__()
        self.model, self.mask, self.left_pad = model, mask, left_pad

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        mask = torch.ones_like(idx) if self.mask else None
        if mask is not None and self.left_pad:
            mask[0, :2] = 0  # a left-padded sequence: under a causal mask its first queries attend to nothing
        elif mask is not None:
            mask[:, -1] = 0  # one padded position: the mask really masks
        return self.model(input_ids=idx, attention_mask=mask).logits


class Seq2SeqLogits(nn.Module):
    """An encoder-decoder (T5) called with a padded source, its decoder reading the same tokens."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        mask = torch.ones_like(idx)
        mask[:, -1] = 0
        return self.model(input_ids=idx, attention_mask=mask, decoder_input_ids=idx).logits


def gpt2(vocab: int = 32, ctx: int = 8) -> tuple[nn.Module, Batch]:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=vocab, n_positions=ctx, n_embd=16, n_layer=1, n_head=2, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)  # fmt: skip
    return tokens(HFLogits(GPT2LMHeadModel(cfg), mask=True), vocab, ctx)


def bert(vocab: int = 32, ctx: int = 8) -> tuple[nn.Module, Batch]:
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=ctx, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)  # fmt: skip
    return tokens(HFLogits(BertForMaskedLM(cfg), mask=True), vocab, ctx)


def llama(vocab: int = 32, ctx: int = 8) -> tuple[nn.Module, Batch]:
    """Llama: RMSNorm, rotary embeddings, SiLU-gated MLP, grouped-query attention (4 query heads over 2), SDPA,
    a left-padded batch."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2 * ctx)  # fmt: skip
    return tokens(HFLogits(LlamaForCausalLM(cfg), mask=True, left_pad=True), vocab, ctx)


def t5(vocab: int = 32, ctx: int = 8) -> tuple[nn.Module, Batch]:
    """T5: relative position buckets as an attention bias, RMS layer norms, encoder and causal decoder with
    cross-attention."""
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(vocab_size=vocab, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2,
                   relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.0,
                   decoder_start_token_id=0)  # fmt: skip
    return tokens(Seq2SeqLogits(T5ForConditionalGeneration(cfg)), vocab, ctx)


def distilbert(vocab: int = 32, ctx: int = 8) -> tuple[nn.Module, Batch]:
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    cfg = DistilBertConfig(vocab_size=vocab, dim=16, n_layers=1, n_heads=2, hidden_dim=32,
                           max_position_embeddings=2 * ctx, dropout=0.0, attention_dropout=0.0)  # fmt: skip
    return tokens(HFLogits(DistilBertForMaskedLM(cfg), mask=True), vocab, ctx)


def gemma2(vocab: int = 32, ctx: int = 8) -> tuple[nn.Module, Batch]:
    """Gemma2: attention-logit and final-logit soft-capping (tanh), a sliding-window layer, one key/value head."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    cfg = Gemma2Config(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=2 * ctx,
                       sliding_window=4)  # fmt: skip
    return tokens(HFLogits(Gemma2ForCausalLM(cfg), mask=True), vocab, ctx)


def mamba(vocab: int = 32, ctx: int = 8) -> tuple[nn.Module, Batch]:
    """Mamba's pure-torch path: a causal depthwise conv1d, the selective scan unrolled over the sequence."""
    from transformers import MambaConfig, MambaForCausalLM

    cfg = MambaConfig(vocab_size=vocab, hidden_size=16, state_size=4, num_hidden_layers=1, expand=2, conv_kernel=4,
                      use_mambapy=False)  # fmt: skip
    return tokens(HFLogits(MambaForCausalLM(cfg), mask=False), vocab, ctx)


def train(
    model: nn.Module, batch: Batch, steps: int, backend: str | None, lr: float = 0.1, dtype: Any = None
) -> list[float]:
    """`steps` SGD steps of cross-entropy (over the last dim of the logits); the loss of each step. `dtype`
    (e.g. torch.float64 for a reference run) casts the model and the floating-point inputs."""
    torch.manual_seed(0)
    if dtype is not None:
        model = model.to(dtype)
    fn = torch.compile(model, backend=backend) if backend else model
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        inputs, target = batch()
        if dtype is not None:
            inputs = tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)
        logits = fn(*inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses
