"""PyTorch builds of the five matched workloads, written from their published descriptions
(docs/workloads.md), with module names that give the same checkpoint layout."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {
    "smollm2": {
        "full": dict(vocab=49152, dim=576, layers=30, heads=9, kv_heads=3, head_dim=64, ffn=1536, seq=128),
        "ci": dict(vocab=512, dim=96, layers=2, heads=6, kv_heads=2, head_dim=16, ffn=256, seq=16),
    },
    "smolvla": {
        "full": dict(dim=720, layers=16, heads=15, kv_heads=5, head_dim=64, ffn=2048, actions=50, action_dim=32, vlm_tokens=16),
        "ci": dict(dim=96, layers=2, heads=6, kv_heads=2, head_dim=16, ffn=256, actions=8, action_dim=8, vlm_tokens=6),
    },
    "unet": {
        "full": dict(base=64, latent=32, context_tokens=77, context_dim=768, head_dim=32, groups=16),
        "ci": dict(base=16, latent=8, context_tokens=8, context_dim=32, head_dim=16, groups=4),
    },
    "resnet50": {
        "full": dict(stem=64, blocks=(3, 4, 6, 3), batch=4, image=224, classes=1000),
        "ci": dict(stem=8, blocks=(1, 1, 1, 1), batch=2, image=32, classes=10),
    },
    "whisper": {
        "full": dict(mels=80, frames=3000, dim=384, heads=6, layers=4, ffn=1536),
        "ci": dict(mels=16, frames=64, dim=64, heads=4, layers=2, ffn=256),
    },
}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary(x, theta):
    """Llama rotary embedding, rotate-half convention; x [B, H, S, D]."""
    d, s = x.shape[-1], x.shape[-2]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d))
    ang = torch.arange(s, dtype=torch.float64, device=x.device)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def sdpa(q, k, v, causal):
    """Softmax attention with key/value heads repeated for grouped queries."""
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        sq, sk = scores.shape[-2], scores.shape[-1]
        mask = torch.ones(sq, sk, dtype=torch.bool, device=scores.device).triu(sk - sq + 1)
        scores = scores.masked_fill(mask, float("-inf"))
    return scores.softmax(-1) @ v


def heads(x, n):
    b, s, _ = x.shape
    return x.view(b, s, n, -1).transpose(1, 2)


def unheads(x):
    b, h, s, d = x.shape
    return x.transpose(1, 2).reshape(b, s, h * d)


def sinusoidal(t, dim, max_period=10000.0):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=t.dtype, device=t.device) / half)
    a = t[:, None] * freqs[None, :]
    return torch.cat([a.cos(), a.sin()], dim=-1)


# ---- SmolLM2 -----
class LlamaAttention(nn.Module):
    def __init__(self, dim, h, kvh, hd, kv_in=None):
        super().__init__()
        self.h, self.kvh = h, kvh
        self.q_proj = nn.Linear(dim, h * hd, bias=False)
        self.k_proj = nn.Linear(kv_in or dim, kvh * hd, bias=False)
        self.v_proj = nn.Linear(kv_in or dim, kvh * hd, bias=False)
        self.o_proj = nn.Linear(h * hd, dim, bias=False)


class SwiGLU(nn.Module):
    def __init__(self, dim, ffn):
        super().__init__()
        self.gate_proj = nn.Linear(dim, ffn, bias=False)
        self.up_proj = nn.Linear(dim, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c, kv_in=None):
        super().__init__()
        self.input_layernorm = RMSNorm(c["dim"])
        self.self_attn = LlamaAttention(c["dim"], c["heads"], c["kv_heads"], c["head_dim"], kv_in)
        self.post_attention_layernorm = RMSNorm(c["dim"])
        self.mlp = SwiGLU(c["dim"], c["ffn"])

    def forward(self, x, theta, causal=True, kv=None):
        a = self.self_attn
        h = self.input_layernorm(x)
        src = h if kv is None else kv
        q, k, v = heads(a.q_proj(h), a.h), heads(a.k_proj(src), a.kvh), heads(a.v_proj(src), a.kvh)
        if kv is None:
            q, k = rotary(q, theta), rotary(k, theta)
        x = x + a.o_proj(unheads(sdpa(q, k, v, causal)))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab"], c["dim"])
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c["layers"]))
        self.norm = RMSNorm(c["dim"])


class SmolLM2(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.model = LlamaModel(c)

    def run(self, inp):
        x = self.model.embed_tokens(inp["input_ids"].long())
        for layer in self.model.layers:
            x = layer(x, 100000.0)
        x = self.model.norm(x)
        logits = (x @ self.model.embed_tokens.weight.t())[0]  # tied head
        loss = F.cross_entropy(logits, inp["labels"].long(), ignore_index=-100)
        return {"logits": logits}, loss


# ---- SmolVLA action expert -----
class SmolVLA(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["dim"]
        self.c = c
        self.action_in_proj = nn.Linear(c["action_dim"], d)
        self.time_mlp_in = nn.Linear(2 * d, d)
        self.time_mlp_out = nn.Linear(d, d)
        kv = c["kv_heads"] * c["head_dim"]
        self.layers = nn.ModuleList(DecoderLayer(c, kv if i % 2 else None) for i in range(c["layers"]))
        self.norm = RMSNorm(d)
        self.action_out_proj = nn.Linear(d, c["action_dim"])

    def run(self, inp):
        d = self.c["dim"]
        temb = self.time_mlp_out(F.silu(self.time_mlp_in(sinusoidal(inp["timestep"], 2 * d))))
        x = self.action_in_proj(inp["noisy_actions"]) + temb[:, None, :]
        for i, layer in enumerate(self.layers):
            x = layer(x, 10000.0, causal=False, kv=inp["vlm_kv"]) if i % 2 else layer(x, 10000.0)
        out = self.action_out_proj(self.norm(x))
        return {"actions": out}, F.mse_loss(out, inp["target"])


# ---- U-Net -----
class ResBlock(nn.Module):
    def __init__(self, cin, cout, temb, groups):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=1e-5)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.time_proj = nn.Linear(temb, cout)
        self.norm2 = nn.GroupNorm(groups, cout, eps=1e-5)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x, t):
        h = self.conv1(F.silu(self.norm1(x))) + self.time_proj(F.silu(t))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return (x if self.skip is None else self.skip(x)) + h


class CrossAttention(nn.Module):
    def __init__(self, c, kv_dim, head_dim):
        super().__init__()
        self.n = c // head_dim
        self.to_q = nn.Linear(c, c, bias=False)
        self.to_k = nn.Linear(kv_dim, c, bias=False)
        self.to_v = nn.Linear(kv_dim, c, bias=False)
        self.to_out = nn.Linear(c, c)

    def forward(self, x, ctx):
        q, k, v = heads(self.to_q(x), self.n), heads(self.to_k(ctx), self.n), heads(self.to_v(ctx), self.n)
        return self.to_out(unheads(sdpa(q, k, v, False)))


class SpatialTransformer(nn.Module):
    def __init__(self, c, ctx_dim, head_dim, groups):
        super().__init__()
        self.norm = nn.GroupNorm(groups, c, eps=1e-5)
        self.proj_in = nn.Conv2d(c, c, 1)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(c), nn.LayerNorm(c), nn.LayerNorm(c)
        self.attn1 = CrossAttention(c, c, head_dim)
        self.attn2 = CrossAttention(c, ctx_dim, head_dim)
        self.ff = nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c))
        self.proj_out = nn.Conv2d(c, c, 1)

    def forward(self, x, ctx):
        n, c, h, w = x.shape
        t = self.proj_in(self.norm(x)).flatten(2).transpose(1, 2)
        n1 = self.norm1(t)
        t = t + self.attn1(n1, n1)
        t = t + self.attn2(self.norm2(t), ctx)
        t = t + self.ff(self.norm3(t))
        return x + self.proj_out(t.transpose(1, 2).reshape(n, c, h, w))


class Level(nn.Module):
    def __init__(self, cin, cout, temb, attn, down, c):
        super().__init__()
        self.res = ResBlock(cin, cout, temb, c["groups"])
        self.attn = SpatialTransformer(cout, c["context_dim"], c["head_dim"], c["groups"]) if attn else None
        self.downsample = nn.Conv2d(cout, cout, 3, stride=2, padding=1) if down else None


class UNet(nn.Module):
    def __init__(self, c):
        super().__init__()
        b = c["base"]
        self.base = b
        self.time_embed = nn.Sequential(nn.Linear(b, 4 * b), nn.SiLU(), nn.Linear(4 * b, 4 * b))
        self.conv_in = nn.Conv2d(4, b, 3, padding=1)
        ch = [b, 2 * b, 4 * b]
        self.down = nn.ModuleList([Level(b, ch[0], 4 * b, False, True, c), Level(ch[0], ch[1], 4 * b, True, True, c),
                                   Level(ch[1], ch[2], 4 * b, True, False, c)])
        self.mid = Level(ch[2], ch[2], 4 * b, True, False, c)
        self.up = nn.ModuleList([Level(ch[1] + ch[0], ch[0], 4 * b, False, False, c),
                                 Level(ch[2] + ch[1], ch[1], 4 * b, True, False, c),
                                 Level(ch[2] + ch[2], ch[2], 4 * b, True, False, c)])
        self.norm_out = nn.GroupNorm(c["groups"], b, eps=1e-5)
        self.conv_out = nn.Conv2d(b, 4, 3, padding=1)

    def run(self, inp):
        ctx = inp["context"]
        t = self.time_embed(sinusoidal(inp["timestep"], self.base))
        h = self.conv_in(inp["latents"])
        skips = []
        for lv in self.down:
            h = lv.res(h, t)
            if lv.attn is not None:
                h = lv.attn(h, ctx)
            skips.append(h)
            if lv.downsample is not None:
                h = lv.downsample(h)
        h = self.mid.attn(self.mid.res(h, t), ctx)
        for i in (2, 1, 0):
            lv = self.up[i]
            h = lv.res(torch.cat([h, skips[i]], dim=1), t)
            if lv.attn is not None:
                h = F.interpolate(lv.attn(h, ctx), scale_factor=2, mode="nearest")
        out = self.conv_out(F.silu(self.norm_out(h)))
        return {"noise_pred": out}, F.mse_loss(out, inp["noise"])


# ---- ResNet-50 (torchvision layout; batch norm in eval mode) -----
class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, 4 * width, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(4 * width)
        self.downsample = None
        if stride != 1 or cin != 4 * width:
            self.downsample = nn.Sequential(nn.Conv2d(cin, 4 * width, 1, stride=stride, bias=False), nn.BatchNorm2d(4 * width))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        return F.relu((x if self.downsample is None else self.downsample(x)) + h)


class ResNet50(nn.Module):
    def __init__(self, c):
        super().__init__()
        s = c["stem"]
        self.conv1 = nn.Conv2d(3, s, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(s)
        cin = s
        for i, n in enumerate(c["blocks"]):
            width = s << i
            blocks = []
            for j in range(n):
                blocks.append(Bottleneck(cin, width, 2 if (j == 0 and i > 0) else 1))
                cin = 4 * width
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(cin, c["classes"])

    def run(self, inp):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(inp["images"]))), 3, 2, 1)
        for i in range(1, 5):
            x = getattr(self, f"layer{i}")(x)
        logits = self.fc(x.mean(dim=(2, 3)))
        return {"logits": logits}, F.cross_entropy(logits, inp["labels"].long())


# ---- Whisper-tiny encoder (Hugging Face layout) -----
class WhisperAttention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)


class WhisperLayer(nn.Module):
    def __init__(self, d, h, ffn):
        super().__init__()
        self.h = h
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.self_attn = WhisperAttention(d)
        self.final_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ffn)
        self.fc2 = nn.Linear(ffn, d)

    def forward(self, x):
        a = self.self_attn
        h = self.self_attn_layer_norm(x)
        o = sdpa(heads(a.q_proj(h), self.h), heads(a.k_proj(h), self.h), heads(a.v_proj(h), self.h), False)
        x = x + a.out_proj(unheads(o))
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class WhisperEncoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["dim"]
        self.conv1 = nn.Conv1d(c["mels"], d, 3, padding=1)
        self.conv2 = nn.Conv1d(d, d, 3, stride=2, padding=1)
        self.embed_positions = nn.Embedding(c["frames"] // 2, d)
        self.layers = nn.ModuleList(WhisperLayer(d, c["heads"], c["ffn"]) for _ in range(c["layers"]))
        self.layer_norm = nn.LayerNorm(d)


class Whisper(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.encoder = WhisperEncoder(c)

    def run(self, inp):
        e = self.encoder
        x = F.gelu(e.conv1(inp["input_features"]))
        x = F.gelu(e.conv2(x)).permute(0, 2, 1)
        x = x + e.embed_positions.weight
        for layer in e.layers:
            x = layer(x)
        x = e.layer_norm(x)
        return {"last_hidden_state": x}, F.mse_loss(x, inp["target"])


BUILDERS = {"smollm2": SmolLM2, "smolvla": SmolVLA, "unet": UNet, "resnet50": ResNet50, "whisper": Whisper}


def build(workload, scale):
    return BUILDERS[workload](CONFIGS[workload][scale])
