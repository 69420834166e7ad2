"""MiniCPM-o 4.5 from its checkpoint by the upstream tensor names, without remote code.

Each part is one of transformers' own classes or a small module of ours with the upstream names
(recipes/minicpm_o.py records the revision the names follow):

* ``vision``: ``vpm.`` transformers ``SiglipVisionModel`` (no pooling head) + ``resampler.`` (ours,
  MiniCPM-V 2.5-style: 64 learned queries, one cross-attention with 2-D sin-cos key positions);
* ``audio``: ``apm.`` transformers ``WhisperEncoder`` + ``audio_projection_layer.`` (ours: linear, ReLU,
  linear) + the average pool of ``audio_pool_step`` frames (no weights);
* ``language``: ``llm.`` transformers ``Qwen3ForCausalLM``;
* ``speech``: ``tts.``: the speech-token decoder as transformers ``LlamaForCausalLM`` (backbone
  ``tts.model``, code embedding ``tts.emb_code.0``, head ``tts.head_code.0`` with its weight norm folded)
  plus the condition module (ours: ``emb_text`` + L2-normalised ``projector_semantic``).

Only safetensors are read; every expected tensor must be present with its shape, and a tensor of
no known part is refused (a checkpoint of another layout fails by name, never loads half-random).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

from exporter.errors import IntegrityError

PARTS = {"vision": ("vpm.", "resampler."), "audio": ("apm.", "audio_projection_layer."), "language": ("llm.",), "speech": ("tts.",)}
from recipes.minicpm_o import UNUSED  # upstream tensors inference never reads: allowed, not loaded


def checkpoint_files(directory: Path) -> dict[str, str]:
    """Tensor name -> safetensors file, from the shard index or the single file."""
    directory = Path(directory)
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        return dict(json.loads(index.read_text())["weight_map"])
    single = directory / "model.safetensors"
    if not single.is_file():
        raise IntegrityError(f"{directory}: no model.safetensors or model.safetensors.index.json", "point --checkpoint at a safetensors snapshot")
    from safetensors import safe_open

    with safe_open(str(single), "np") as f:
        return {k: "model.safetensors" for k in f.keys()}


def _by_file(files: dict[str, str], names) -> dict[str, list[str]]:
    """Tensor names grouped by the safetensors file that holds them (each file opened once)."""
    out: dict[str, list[str]] = {}
    for k in names:
        out.setdefault(files[k], []).append(k)
    return out


def check_layout(directory: Path, cfg: dict) -> dict[str, str]:
    """Every expected tensor present with its shape; nothing of an unknown layout. Returns name -> file."""
    from safetensors import safe_open

    from recipes.shapes import minicpmo_tensor_shapes

    want = minicpmo_tensor_shapes(cfg)
    files = checkpoint_files(directory)
    missing = sorted(set(want) - set(files))
    unexpected = sorted(k for k in set(files) - set(want) if not k.startswith(UNUSED))
    mismatched = []
    for fname, names in _by_file(files, [k for k in want if k in files]).items():
        with safe_open(str(Path(directory) / fname), "np") as f:
            for k in names:
                shape = tuple(f.get_slice(k).get_shape())
                if shape != want[k]:
                    mismatched.append(f"{k}: {list(shape)} (config says {list(want[k])})")
    problems = []
    for label, items in (("missing tensors", missing), ("tensors of no MiniCPM-o part", unexpected), ("shape mismatches", mismatched)):
        if items:
            problems.append(f"{len(items)} {label}: {items[:5]}" + (" ..." if len(items) > 5 else ""))
    if problems:
        raise IntegrityError(f"{directory}: not a MiniCPM-o 4.5 checkpoint of its config.json: " + "; ".join(problems),
                             "use a complete snapshot whose tensor names follow the recipe's upstream revision (recipes/minicpm_o.py)")
    return files


def _read(directory: Path, files: dict[str, str], prefix: str) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    out: dict[str, torch.Tensor] = {}
    names = sorted(k for k in files if k.startswith(prefix) and not k.startswith(UNUSED))
    for fname, ks in _by_file(files, names).items():
        with safe_open(str(Path(directory) / fname), "pt") as f:
            for k in ks:
                out[k[len(prefix):]] = f.get_tensor(k).float()
    return out


def _fill(module: nn.Module, tensors: dict[str, torch.Tensor], where: str) -> nn.Module:
    """Copy tensors into `module` (built without initialisation), strictly by name."""
    result = module.load_state_dict(tensors, strict=False)
    bad = [*result.missing_keys, *result.unexpected_keys]
    if bad:
        raise IntegrityError(f"{where}: tensors do not match the module: {bad[:5]}", "the checkpoint's config.json and tensors disagree")
    return module.requires_grad_(False).eval()


def _no_init():
    from transformers.initialization import no_init_weights

    return no_init_weights()


def _eager(config):
    config._attn_implementation = "eager"
    return config


# ---- vision -------------------------------------------------------------------------------------


def sincos_2d(embed_dim: int, h: int, w: int) -> np.ndarray:
    """[h * w, embed_dim] 2-D sin-cos positions as MiniCPM-V's resampler builds them (height half, then width half)."""
    def one(dim: int, pos: np.ndarray) -> np.ndarray:
        omega = 1.0 / 10000 ** (np.arange(dim // 2, dtype=np.float64) / (dim / 2.0))
        out = np.einsum("hw,d->hwd", pos, omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=-1)

    grid_w, grid_h = np.meshgrid(np.arange(w, dtype=np.float64), np.arange(h, dtype=np.float64))
    emb = np.concatenate([one(embed_dim // 2, grid_w), one(embed_dim // 2, grid_h)], axis=-1)
    return emb.reshape(h * w, embed_dim).astype(np.float32)


def navit_position_ids(rows: int, cols: int, per_side: int) -> torch.Tensor:
    """Position-embedding rows of a rows x cols patch grid (MiniCPM's NaViT SigLIP: bucketised fractional coordinates)."""
    boundaries = torch.arange(1 / per_side, 1.0, 1 / per_side)
    h = torch.bucketize(torch.arange(0, 1 - 1e-6, 1 / rows), boundaries, right=True)
    w = torch.bucketize(torch.arange(0, 1 - 1e-6, 1 / cols), boundaries, right=True)
    return (h[:, None] * per_side + w).flatten()


class Resampler(nn.Module):
    """``resampler.``: learned queries attend once over the projected vision tokens (+ 2-D positions)."""

    def __init__(self, num_queries: int, embed_dim: int, kv_dim: int, grid: tuple[int, int]):
        super().__init__()
        self.query = nn.Parameter(torch.empty(num_queries, embed_dim))
        self.kv_proj = nn.Linear(kv_dim, embed_dim, bias=False) if kv_dim != embed_dim else nn.Identity()
        self.attn = nn.MultiheadAttention(embed_dim, max(embed_dim // 128, 1))
        self.ln_q = nn.LayerNorm(embed_dim, eps=1e-6)
        self.ln_kv = nn.LayerNorm(embed_dim, eps=1e-6)
        self.ln_post = nn.LayerNorm(embed_dim, eps=1e-6)
        self.proj = nn.Parameter(torch.empty(embed_dim, embed_dim))
        self.register_buffer("pos_embed", torch.from_numpy(sincos_2d(embed_dim, *grid)), persistent=False)

    def forward(self, x):  # [1, L, kv_dim] -> [1, Q, E]
        x = self.ln_kv(self.kv_proj(x)).permute(1, 0, 2)
        q = self.ln_q(self.query).unsqueeze(1)
        out = self.attn(q, x + self.pos_embed.unsqueeze(1), x, need_weights=False)[0]
        return self.ln_post(out.permute(1, 0, 2)) @ self.proj


class VisionSlice(nn.Module):
    """One normalised slice [1, 3, S, S] -> [1, query_num, llm hidden]: patch embedding + NaViT positions,
    transformers' SigLIP encoder layers and post-norm, then the resampler."""

    def __init__(self, vpm: nn.Module, resampler: Resampler, image: int, patch: int, per_side: int):
        super().__init__()
        self.vpm, self.resampler = vpm, resampler
        ids = navit_position_ids(image // patch, image // patch, per_side)
        self.register_buffer("pos", vpm.embeddings.position_embedding.weight.detach()[ids].clone().unsqueeze(0), persistent=False)

    def forward(self, pixel_values):
        x = self.vpm.embeddings.patch_embedding(pixel_values).flatten(2).transpose(1, 2) + self.pos
        for layer in self.vpm.encoder.layers:
            x = layer(x, None)
        return self.resampler(self.vpm.post_layernorm(x))


def load_vision(directory: Path, cfg: dict, files: dict[str, str]) -> VisionSlice:
    from transformers import SiglipVisionConfig, SiglipVisionModel

    vc = dict(cfg["vision_config"])
    layers = vc["num_hidden_layers"] - (1 if cfg.get("drop_vision_last_layer") else 0)
    keep = {k: vc[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads", "image_size", "patch_size",
                               "layer_norm_eps", "hidden_act", "num_channels") if k in vc}
    config = _eager(SiglipVisionConfig(**keep, num_hidden_layers=layers, vision_use_head=False))
    with _no_init():
        vpm = SiglipVisionModel(config)
    vpm = _fill(vpm, _read(directory, files, "vpm."), "vpm")
    n = cfg["image_size"] // cfg["patch_size"]
    with _no_init():
        res = Resampler(cfg["query_num"], cfg["hidden_size"], vc["hidden_size"], (n, n))
    res = _fill(res, _read(directory, files, "resampler."), "resampler")
    return VisionSlice(vpm, res, cfg["image_size"], cfg["patch_size"], vc["image_size"] // vc["patch_size"]).eval()


# ---- audio --------------------------------------------------------------------------------------


class MultiModalProjector(nn.Module):
    """Upstream's MultiModalProjector (linear, ReLU, linear): ``audio_projection_layer.`` and the "mlp"
    ``tts.projector_semantic.``."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.linear1 = nn.Linear(in_dim, out_dim)
        self.relu = nn.ReLU()
        self.linear2 = nn.Linear(out_dim, out_dim)

    def forward(self, x):
        return self.linear2(self.relu(self.linear1(x)))


class AudioChunk(nn.Module):
    """Log-mel frames [1, mel, F] -> [1, F / 2 / pool, llm hidden]: transformers' Whisper encoder (convolutions,
    positions, layers, final norm; the last hidden state), the projector, then the average pool."""

    def __init__(self, apm: nn.Module, projector: MultiModalProjector, pool: int):
        super().__init__()
        self.apm, self.projector, self.pool = apm, projector, pool

    def forward(self, input_features):
        x = nn.functional.gelu(self.apm.conv1(input_features))
        x = nn.functional.gelu(self.apm.conv2(x)).permute(0, 2, 1)
        x = x + self.apm.embed_positions.weight[: x.shape[1]]
        for layer in self.apm.layers:
            x = layer(x, None)
        x = self.projector(self.apm.layer_norm(x))
        return nn.functional.avg_pool1d(x.transpose(1, 2), self.pool, self.pool).transpose(1, 2)


def load_audio(directory: Path, cfg: dict, files: dict[str, str]) -> AudioChunk:
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    ac = cfg["audio_config"]
    keep = {k: ac[k] for k in ("d_model", "encoder_layers", "encoder_attention_heads", "encoder_ffn_dim", "num_mel_bins",
                               "max_source_positions", "activation_function") if k in ac}
    config = _eager(WhisperConfig(**keep))
    with _no_init():
        apm = WhisperEncoder(config)
    apm = _fill(apm, _read(directory, files, "apm."), "apm")
    with _no_init():
        proj = MultiModalProjector(ac["encoder_ffn_dim"] // 4, cfg["hidden_size"])
    proj = _fill(proj, _read(directory, files, "audio_projection_layer."), "audio_projection_layer")
    return AudioChunk(apm, proj, cfg["audio_pool_step"]).eval()


# ---- language -----------------------------------------------------------------------------------

QWEN3_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "head_dim", "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings", "hidden_act", "attention_bias")


def load_language(directory: Path, cfg: dict, files: dict[str, str]) -> nn.Module:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    keep = {k: cfg[k] for k in QWEN3_KEYS if k in cfg}
    config = _eager(Qwen3Config(**keep, rope_parameters={"rope_type": "default", "rope_theta": float(cfg.get("rope_theta", 1e6))}))
    with _no_init():
        llm = Qwen3ForCausalLM(config)
    return _fill(llm, _read(directory, files, "llm."), "llm")


# ---- speech-token decoder -----------------------------------------------------------------------


class SpeechCondition(nn.Module):
    """Reply text ids [1, N] and their LLM hidden states [1, N, llm] -> condition rows [1, N, H]
    (``emb_text(ids) + normalize(projector_semantic(hidden))``) and the audio-BOS row [1, 1, H]; the runtime
    feeds rows[:n] then the BOS row to the decoder's prefill."""

    def __init__(self, num_text_tokens: int, hidden: int, llm_dim: int, bos: int):
        super().__init__()
        self.emb_text = nn.Embedding(num_text_tokens, hidden)
        self.projector_semantic = MultiModalProjector(llm_dim, hidden)
        self.bos = bos

    def forward(self, text_ids, llm_hidden):
        s = self.projector_semantic(llm_hidden)
        s = s / torch.clamp(torch.sqrt((s * s).sum(-1, keepdim=True)), min=1e-12)
        rows = nn.functional.embedding(text_ids, self.emb_text.weight) + s
        return rows, self.emb_text.weight[self.bos : self.bos + 1].unsqueeze(0)


class SpeechModel(nn.Module):
    def __init__(self, condition: SpeechCondition, decoder: nn.Module):
        super().__init__()
        self.condition, self.decoder = condition, decoder


def load_speech(directory: Path, cfg: dict, files: dict[str, str]) -> SpeechModel:
    from transformers import LlamaConfig, LlamaForCausalLM

    tc = cfg["tts_config"]
    if tc.get("num_vq", 1) != 1 or tc.get("projector_type", "mlp") != "mlp" or tc.get("backbone_model", "llama") != "llama":
        raise IntegrityError(f"{directory}: tts_config {dict((k, tc.get(k)) for k in ('num_vq', 'projector_type', 'backbone_model'))} "
                             "is not the released 4.5 speech decoder (one codebook, mlp projector, llama backbone)",
                             "extend recipes/minicpm_o.py for that variant")
    t = _read(directory, files, "tts.")
    g, v = t.pop("head_code.0.parametrizations.weight.original0"), t.pop("head_code.0.parametrizations.weight.original1")
    head = g * v / torch.linalg.vector_norm(v, dim=1, keepdim=True)  # torch weight_norm(dim=0), folded
    config = _eager(LlamaConfig(vocab_size=tc["num_audio_tokens"], hidden_size=tc["hidden_size"], intermediate_size=tc["intermediate_size"],
                                num_hidden_layers=tc["num_hidden_layers"], num_attention_heads=tc["num_attention_heads"],
                                num_key_value_heads=tc["num_key_value_heads"], max_position_embeddings=tc["max_position_embeddings"],
                                rms_norm_eps=tc.get("rms_norm_eps", 1e-6), tie_word_embeddings=False,
                                rope_parameters={"rope_type": "default", "rope_theta": float(tc.get("rope_theta", 10000.0))}))
    with _no_init():
        dec = LlamaForCausalLM(config)
    dec_t = {("model." + k[len("model."):]): w for k, w in t.items() if k.startswith("model.")}
    dec_t |= {"model.embed_tokens.weight": t.pop("emb_code.0.weight"), "lm_head.weight": head}
    dec = _fill(dec, dec_t, "tts decoder")
    with _no_init():
        cond = SpeechCondition(tc["num_text_tokens"], tc["hidden_size"], tc["llm_dim"], tc["audio_bos_token_id"])
    cond = _fill(cond, {k: w for k, w in t.items() if k.startswith(("emb_text.", "projector_semantic."))}, "tts condition")
    return SpeechModel(cond, dec).eval()


LOADERS = {"vision": load_vision, "audio": load_audio, "language": load_language, "speech": load_speech}


def load_part(directory: Path, part: str) -> nn.Module:
    """One part of the checkpoint at `directory` (its config.json and safetensors), checked by name and shape."""
    cfg = json.loads((Path(directory) / "config.json").read_text())
    files = check_layout(directory, cfg)
    with torch.no_grad():
        return LOADERS[part](Path(directory), cfg, files)


def step_module(model: nn.Module, part: str, component, pooled_mean: bool = False) -> nn.Module:
    """The exported (and per-call reference) module of one component of a part."""
    from exporter.models.split_decoder import split_step_module

    if part in ("vision", "audio"):
        return model
    if part == "language":
        return split_step_module(model, component, pooled_mean)
    if component.role == "encoder":
        return model.condition
    return split_step_module(model.decoder, component, pooled_mean)
