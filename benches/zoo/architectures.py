"""The zoo's architectures: what users bring, built from torchvision and transformers configurations.

Each entry builds a module (in eval mode, every parameter and normalisation statistic re-initialised
from a seed with a spread: default initialisation leaves heads at zero and outputs near 1e-9, which
any runtime would "match") and its example inputs. `tiny=True` gives a configuration of the same
architecture small enough (<= 1 MB of weights) to check into the repository and run on host in CI.
"""
import math

import torch
from torch import nn

IMAGE = 224
SEQ = 128
MASKED = 9  # attention-mask positions set to 0 at the end of each sequence


def reinit(module, seed):
    """Every parameter and buffer of floating type drawn from a seeded distribution with a spread."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(max(fan_in, 1)))
            elif name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
        for name, b in module.named_buffers():
            if not b.is_floating_point():
                continue
            if name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g))
            elif name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))
    return module.eval()


class FirstTensor(nn.Module):
    """Calls `inner(**named inputs)` (or `inner(*inputs)` when `names` is None) and returns its tensor outputs as a tuple (dicts and model
    outputs flattened in order), so every exporter sees plain tensors."""

    def __init__(self, inner, names):
        super().__init__()
        self.inner, self.names = inner, names

    def forward(self, *args):
        out = self.inner(*args) if self.names is None else self.inner(**dict(zip(self.names, args)))
        if isinstance(out, torch.Tensor):
            return out
        if isinstance(out, dict):
            out = list(out.values())
        if hasattr(out, "to_tuple"):
            out = out.to_tuple()
        tensors = [t for t in out if isinstance(t, torch.Tensor)]
        return tensors[0] if len(tensors) == 1 else tuple(tensors[:1])


class Detection(nn.Module):
    """A torchvision detector on one image: boxes, scores and labels of that image."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, image):
        out = self.inner(list(image))[0]
        return out["boxes"], out["scores"], out["labels"]


def image(batch, size, seed, channels=3):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, channels, size, size, generator=g)]


def tokens(batch, seq, vocab, seed, mask=True):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    if not mask:
        return [ids]
    m = torch.ones(batch, seq, dtype=torch.int64)
    m[:, seq - min(MASKED, seq // 4):] = 0
    return [ids, m]


# --- torchvision ---------------------------------------------------------------------------------

def tv(name, tiny_fn=None, size=IMAGE, tiny_size=32, wrap=None):
    def build(tiny, seed):
        import torchvision

        full = torchvision.models
        for part in name.split("."):
            full = getattr(full, part)
        module = tiny_fn() if tiny else full(weights=None, **({"weights_backbone": None} if "." in name else {}))
        if wrap:
            module = wrap(module)
        return reinit(module, seed), ["input"], image(1, tiny_size if tiny else size, seed + 1)
    return build


def seg(name, tiny_fn, size=IMAGE):
    def wrap(m):
        return FirstTensor(m, None)
    return tv(name, tiny_fn, size=size, wrap=wrap)


def tiny_resnet():
    from torchvision.models.resnet import BasicBlock, ResNet

    # ResNet's stages at depth 1 and 16 to 64 planes (torchvision fixes 64 to 512).
    m = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10)
    m.inplanes = 16
    m.conv1 = nn.Conv2d(3, 16, 7, 2, 3, bias=False)
    m.bn1 = nn.BatchNorm2d(16)
    m.layer1 = m._make_layer(BasicBlock, 16, 1)
    m.layer2 = m._make_layer(BasicBlock, 32, 1, stride=2)
    m.layer3 = m._make_layer(BasicBlock, 32, 1, stride=2)
    m.layer4 = m._make_layer(BasicBlock, 64, 1, stride=2)
    m.fc = nn.Linear(64, 10)
    return m


def tiny_mobilenet_v3():
    from torchvision.models.mobilenetv3 import InvertedResidualConfig, MobileNetV3

    c = InvertedResidualConfig
    settings = [c(16, 3, 16, 16, True, "RE", 2, 1, 1.0), c(16, 3, 32, 24, False, "HS", 2, 1, 1.0),
                c(24, 5, 48, 32, True, "HS", 1, 1, 1.0)]
    return MobileNetV3(settings, last_channel=64, num_classes=10)


def tiny_efficientnet():
    from torchvision.models.efficientnet import EfficientNet, MBConvConfig

    settings = [MBConvConfig(1, 3, 1, 16, 16, 1), MBConvConfig(4, 3, 2, 16, 24, 1), MBConvConfig(4, 5, 2, 24, 32, 1)]
    return EfficientNet(settings, dropout=0.0, last_channel=64, num_classes=10)


def tiny_convnext():
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    return ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], num_classes=10)


def tiny_regnet():
    from torchvision.models.regnet import BlockParams, RegNet

    params = BlockParams.from_init_params(depth=4, w_0=16, w_a=8.0, w_m=2.0, group_width=8, se_ratio=0.25)
    return RegNet(params, num_classes=10)


def tiny_vit():
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                             num_classes=10)


def tiny_swin():
    from torchvision.models.swin_transformer import SwinTransformer

    return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[1, 2], window_size=[4, 4],
                           num_classes=10)


def tiny_mobilenet_v2():
    from torchvision.models.mobilenetv2 import MobileNetV2

    return MobileNetV2(num_classes=10, width_mult=0.25, inverted_residual_setting=[[1, 16, 1, 1], [6, 24, 1, 2],
                                                                                    [6, 32, 1, 2]])


def tiny_densenet():
    from torchvision.models.densenet import DenseNet

    return DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16, bn_size=2, num_classes=10)


def tiny_deeplab():
    from torchvision.models.segmentation.deeplabv3 import ASPP

    return SegTiny(nn.Sequential(ASPP(32, [2, 4, 6], 16), nn.Conv2d(16, 4, 1)))


def tiny_lraspp():
    from torchvision.models.segmentation.lraspp import LRASPPHead

    class LR(nn.Module):
        def __init__(self):
            super().__init__()
            self.low = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.Hardswish())
            self.high = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.Hardswish())
            self.head = LRASPPHead(8, 16, 4, 16)

        def forward(self, x):
            low = self.low(x)
            out = self.head({"low": low, "high": self.high(low)})
            return {"out": nn.functional.interpolate(out, size=x.shape[-2:], mode="bilinear", align_corners=False)}
    return LR()


def tiny_fcn():
    from torchvision.models.segmentation.fcn import FCNHead

    return SegTiny(FCNHead(32, 4))


class SegTiny(nn.Module):
    """A two-conv backbone under a torchvision segmentation head, upsampled like torchvision's models."""

    def __init__(self, head):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(),
                                      nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU())
        self.head = head

    def forward(self, x):
        out = self.head(self.backbone(x))
        return {"out": nn.functional.interpolate(out, size=x.shape[-2:], mode="bilinear", align_corners=False)}


class TinyBackbone(nn.Module):
    """Two strided convolutions: the backbone of the tiny detectors (16 channels at stride 4)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.Conv2d(8, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU())
        self.out_channels = 16

    def forward(self, x):
        return self.body(x)


def tiny_detector(name):
    from torchvision.models.detection import FasterRCNN, RetinaNet
    from torchvision.models.detection.anchor_utils import AnchorGenerator, DefaultBoxGenerator
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
    from torchvision.models.detection.ssd import SSD, SSDHead
    from torchvision.ops import MultiScaleRoIAlign

    anchors = AnchorGenerator(((16, 32),), ((0.5, 1.0, 2.0),))
    if name.startswith("fasterrcnn"):
        return FasterRCNN(TinyBackbone(), min_size=96, max_size=96, rpn_anchor_generator=anchors,
                          box_roi_pool=MultiScaleRoIAlign(["0"], 7, 2), box_head=TwoMLPHead(16 * 49, 32),
                          box_predictor=FastRCNNPredictor(32, 4))
    if name.startswith("retinanet"):
        return RetinaNet(TinyBackbone(), num_classes=4, min_size=96, max_size=96, anchor_generator=anchors)
    return SSD(TinyBackbone(), DefaultBoxGenerator([[2]]), (96, 96), num_classes=4, head=SSDHead([16], [4], 4))


def detector(name, size=320):
    def build(tiny, seed):
        import torchvision

        full = getattr(torchvision.models.detection, name)
        module = Detection(tiny_detector(name) if tiny else full(weights=None, weights_backbone=None))
        side = 96 if tiny else size
        return reinit(module, seed), ["image"], [torch.rand(1, 3, side, side,
                                                            generator=torch.Generator().manual_seed(seed + 1))]
    return build


# --- transformers --------------------------------------------------------------------------------

def hf(model_class, config_class, full, tiny_cfg, inputs="text", vocab_key="vocab_size"):
    def build(tiny, seed):
        import transformers

        config = getattr(transformers, config_class)(**(tiny_cfg if tiny else full))
        try:
            config._attn_implementation = "eager"
        except Exception:  # noqa: BLE001 - older configs
            pass
        model = getattr(transformers, model_class)(config)
        if model_class == "WhisperModel":
            model = model.get_encoder()
        # A text model's positions bound its sequence (CLIP's text tower has 77).
        seq = 16 if tiny else min(SEQ, getattr(config, "max_position_embeddings", SEQ))
        if inputs == "text":
            names = ["input_ids", "attention_mask"]
            feeds = tokens(1, seq, getattr(config, vocab_key), seed + 1)
        elif inputs == "ids":
            names, feeds = ["input_ids"], tokens(1, seq, getattr(config, vocab_key), seed + 1, mask=False)
        elif inputs == "pixels":
            size = config.image_size
            names, feeds = ["pixel_values"], image(1, size, seed + 1)
        else:  # audio features
            frames = 2 * config.max_source_positions
            g = torch.Generator().manual_seed(seed + 1)
            names, feeds = ["input_features"], [torch.randn(1, config.num_mel_bins, frames, generator=g)]
        return reinit(FirstTensor(model, names), seed), names, feeds
    return build


TINY_TEXT = dict(vocab_size=512, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                 max_position_embeddings=64)


def bert_like(model, config, full=None, tiny=None, **kw):
    return hf(model, config, full or {}, tiny or TINY_TEXT, **kw)


# --- hand-written: a UNet and an LSTM ------------------------------------------------------------

class UNet(nn.Module):
    def __init__(self, width=32, depth=3):
        super().__init__()
        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(),
                                 nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())
        chans = [width * 2 ** i for i in range(depth + 1)]
        self.down = nn.ModuleList([block(3 if i == 0 else chans[i - 1], chans[i]) for i in range(depth)])
        self.mid = block(chans[depth - 1], chans[depth])
        self.up = nn.ModuleList([nn.ConvTranspose2d(chans[i + 1], chans[i], 2, stride=2) for i in reversed(range(depth))])
        self.dec = nn.ModuleList([block(chans[i] * 2, chans[i]) for i in reversed(range(depth))])
        self.out = nn.Conv2d(chans[0], 2, 1)

    def forward(self, x):
        skips = []
        for d in self.down:
            x = d(x)
            skips.append(x)
            x = nn.functional.max_pool2d(x, 2)
        x = self.mid(x)
        for up, dec in zip(self.up, self.dec):
            x = up(x)
            x = nn.functional.interpolate(x, size=skips[-1].shape[-2:], mode="nearest")
            x = dec(torch.cat([x, skips.pop()], 1))
        return self.out(x)


class BiLSTM(nn.Module):
    def __init__(self, features=64, hidden=128, layers=2, classes=10):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, layers, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        return self.head(self.lstm(x)[0])


def unet(tiny, seed):
    m = UNet(8, 2) if tiny else UNet(32, 3)
    return reinit(m, seed), ["image"], image(1, 32 if tiny else 256, seed + 1)


def lstm(tiny, seed):
    m = BiLSTM(8, 16, 1, 4) if tiny else BiLSTM()
    g = torch.Generator().manual_seed(seed + 1)
    return reinit(m, seed), ["features"], [torch.randn(1, 12 if tiny else 100, 8 if tiny else 64, generator=g)]


LLAMA = dict(vocab_size=32000, hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8,
             num_key_value_heads=8, max_position_embeddings=512)
TINY_LLAMA = dict(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, max_position_embeddings=64)

# name -> (family, builder). Families: classification, segmentation, detection, text, vision-text, audio, other.
ARCHITECTURES = {
    "resnet50": ("classification", tv("resnet50", tiny_resnet)),
    "mobilenet_v3_large": ("classification", tv("mobilenet_v3_large", tiny_mobilenet_v3)),
    "mobilenet_v2": ("classification", tv("mobilenet_v2", tiny_mobilenet_v2)),
    "efficientnet_b0": ("classification", tv("efficientnet_b0", tiny_efficientnet)),
    "convnext_tiny": ("classification", tv("convnext_tiny", tiny_convnext)),
    "regnet_y_400mf": ("classification", tv("regnet_y_400mf", tiny_regnet)),
    "densenet121": ("classification", tv("densenet121", tiny_densenet)),
    "vit_b_16": ("classification", tv("vit_b_16", tiny_vit)),
    "swin_t": ("classification", tv("swin_t", tiny_swin)),
    "deeplabv3_mobilenet_v3_large": ("segmentation", seg("segmentation.deeplabv3_mobilenet_v3_large", tiny_deeplab, 320)),
    "lraspp_mobilenet_v3_large": ("segmentation", seg("segmentation.lraspp_mobilenet_v3_large", tiny_lraspp, 320)),
    "fcn_resnet50": ("segmentation", seg("segmentation.fcn_resnet50", tiny_fcn, 320)),
    "ssdlite320_mobilenet_v3_large": ("detection", detector("ssdlite320_mobilenet_v3_large")),
    "retinanet_resnet50_fpn": ("detection", detector("retinanet_resnet50_fpn", 512)),
    "fasterrcnn_resnet50_fpn": ("detection", detector("fasterrcnn_resnet50_fpn", 512)),
    "bert_base": ("text", bert_like("BertModel", "BertConfig")),
    "minilm_l6": ("text", bert_like("BertModel", "BertConfig", dict(hidden_size=384, num_hidden_layers=6,
                                                                   num_attention_heads=12, intermediate_size=1536))),
    "roberta_base": ("text", bert_like("RobertaModel", "RobertaConfig", tiny=dict(TINY_TEXT, pad_token_id=1))),
    "distilbert": ("text", hf("DistilBertModel", "DistilBertConfig", {},
                              dict(vocab_size=512, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                   max_position_embeddings=64))),
    "deberta_v2": ("text", bert_like("DebertaV2Model", "DebertaV2Config", dict(hidden_size=384, num_hidden_layers=4,
                                                                               num_attention_heads=6,
                                                                               intermediate_size=1536))),
    "albert": ("text", bert_like("AlbertModel", "AlbertConfig", tiny=dict(TINY_TEXT, embedding_size=16))),
    "gpt2": ("text", hf("GPT2Model", "GPT2Config", {}, dict(vocab_size=512, n_embd=32, n_layer=2, n_head=2,
                                                          n_positions=64))),
    "t5_small_encoder": ("text", hf("T5EncoderModel", "T5Config", dict(d_model=512, num_layers=6, num_heads=8,
                                                                       d_ff=2048, d_kv=64),
                                    dict(vocab_size=512, d_model=32, num_layers=2, num_heads=2, d_ff=64, d_kv=16))),
    "llama": ("text", hf("LlamaModel", "LlamaConfig", LLAMA, TINY_LLAMA)),
    "qwen2": ("text", hf("Qwen2Model", "Qwen2Config", dict(LLAMA, num_key_value_heads=2), TINY_LLAMA)),
    "mistral": ("text", hf("MistralModel", "MistralConfig", dict(LLAMA, num_key_value_heads=2), TINY_LLAMA)),
    "whisper_tiny_encoder": ("audio", hf("WhisperModel", "WhisperConfig",
                                         dict(d_model=384, encoder_layers=4, encoder_attention_heads=6,
                                              decoder_layers=1, decoder_attention_heads=6, encoder_ffn_dim=1536,
                                              decoder_ffn_dim=1536),
                                         dict(d_model=32, encoder_layers=2, encoder_attention_heads=2, decoder_layers=1,
                                              decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                              num_mel_bins=16, max_source_positions=16, max_target_positions=16),
                                         inputs="audio")),
    "clip_text": ("vision-text", hf("CLIPTextModel", "CLIPTextConfig", {},
                                    dict(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, max_position_embeddings=64), inputs="ids")),
    "clip_vision": ("vision-text", hf("CLIPVisionModel", "CLIPVisionConfig", {},
                                      dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=2, image_size=32, patch_size=8), inputs="pixels")),
    "vit_hf": ("classification", hf("ViTModel", "ViTConfig", {},
                                    dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=64, image_size=32, patch_size=8), inputs="pixels")),
    "unet": ("other", unet),
    "bilstm": ("other", lstm),
}
