"""The model zoo: small versions of the families users compile train through the nprof backend as written,
with the loss of every step equal to eager's (rel 1e-4). Models live in `tests.compiler.zoo`."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")

from nprof.compiler import STATS  # noqa: E402
from tests.compiler import zoo  # noqa: E402

STEPS = 3


def _same_training(
    build: Callable[[], tuple[torch.nn.Module, zoo.Batch]], steps: int = STEPS, lr: float = 0.1
) -> list[float]:
    """Train a model eagerly and through nprof from the same weights and batches; losses must agree."""
    torch.manual_seed(0)
    model, _ = build()
    twin = copy.deepcopy(model)
    torch.manual_seed(0)
    _, eager_batches = build()
    torch.manual_seed(0)
    _, device_batches = build()
    eager = zoo.train(model, eager_batches, steps, None, lr)
    torch._dynamo.reset()
    STATS.reset()
    got = zoo.train(twin, device_batches, steps, "nprof", lr)
    assert got == pytest.approx(eager, rel=1e-4)
    assert STATS.fallbacks == 0
    assert len(STATS.device_ns) >= 2 * steps  # forward and backward ran on the device every step
    return got


@pytest.mark.parametrize("conv", [False, True], ids=["linear-patches", "conv-patches"])
def test_vit(conv: bool) -> None:
    _same_training(lambda: zoo.images(zoo.ViT(conv=conv), 8))


@pytest.mark.slow
def test_resnet18_shaped_cnn() -> None:
    # batch 8: the last stages' batch norms normalise 1x1 maps over the batch; with batch 2 fp32 eager itself
    # strays from fp64 by 3x in the gradients (ill-conditioned), with 8 both agree to ~1e-5
    _same_training(lambda: zoo.images(zoo.ResNet18(), 16, batch=8), steps=2)


@pytest.mark.slow
def test_resnet18_shaped_cnn_at_its_default_224x224() -> None:
    """resnet18's layout (narrow) at torchvision's default image size: the stem's 112x112 map max-pools to
    56x56, more than one SBUF tile a channel (`ops_pool.plan` cuts it into bands), forward and backward.
    ~6 s CPU (the full-width model: `bench/compile.py --only resnet18_224`)."""
    _same_training(lambda: zoo.images(zoo.ResNet18(width=4), 224, batch=1), steps=2)


def test_nanogpt_block() -> None:
    _same_training(lambda: zoo.tokens(zoo.NanoGPT(), 32, 8))


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_recurrent_language_models(cell: bool) -> None:
    import torch._dynamo

    assert torch._dynamo.config.allow_rnn  # set by the backend: RNNs are compiled, not silently skipped
    _same_training(lambda: zoo.tokens(zoo.RNNLM(cell), 16, 5))


def test_embedding_bag() -> None:
    _same_training(zoo.bag)


def test_hugging_face_gpt2() -> None:
    pytest.importorskip("transformers")
    _same_training(zoo.gpt2)


def test_hugging_face_bert() -> None:
    pytest.importorskip("transformers")
    _same_training(zoo.bert)


@pytest.mark.parametrize(
    "build", [lambda: zoo.images(zoo.MobileNetV2ish(), 16, batch=4), lambda: zoo.images(zoo.ConvNeXtish(), 16),
              lambda: zoo.images(zoo.EfficientNetish(), 16, batch=4)],
    ids=["mobilenetv2-blocks", "convnext-blocks", "efficientnet-blocks"],
)  # fmt: skip
def test_depthwise_cnns(build: Callable[[], tuple[torch.nn.Module, zoo.Batch]]) -> None:
    """Depthwise convolutions (strided and 7x7), ReLU6, LayerNorm over channels-last, squeeze-excite."""
    _same_training(build)


@pytest.mark.parametrize("family", ["llama", "t5", "distilbert"])
def test_hugging_face_llama_t5_distilbert(family: str) -> None:
    pytest.importorskip("transformers")
    _same_training(getattr(zoo, family))


@pytest.mark.parametrize("family", ["gemma2", "mamba"])
def test_hugging_face_gemma2_soft_capping_and_mamba_conv1d(family: str) -> None:
    pytest.importorskip("transformers")
    _same_training(getattr(zoo, family))
