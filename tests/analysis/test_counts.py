import pytest
import torch

import zoo

PUBLISHED = {  # ../shared/reference/architectures.md
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
    "llama-3.1-8b": 8_030_261_248,
    "qwen3-0.6b": 596_049_920,
    "qwen3-1.7b": 1_720_574_976,
    "qwen3-4b": 4_022_468_096,
    "qwen3-8b": 8_190_735_360,
    "qwen3-30b-a3b": 30_532_122_624,
    "gpt-oss-20b": 20_914_757_184,
    "gpt-oss-120b": 116_829_156_672,
    "mistral-7b": 7_241_732_096,
    # not in the reference table: the model card's 46.7B, exactly total_size / 2 of the bf16
    # checkpoint's model.safetensors.index.json (93,405,585,408 bytes)
    "mixtral-8x7b": 46_702_792_704,
    "gemma-3-270m": 268_098_176,
    "gemma-3-1b": 999_885_952,
}


@pytest.mark.parametrize("name,total", sorted(PUBLISHED.items()))
def test_total_parameters_match_published_counts(name, total):
    count = zoo.count_params(zoo.spec(name))
    assert count.total == total
    assert sum(count.by_component.values()) == total


def test_active_parameters_follow_the_documented_conventions():
    oss20 = zoo.count_params(zoo.spec("gpt-oss-20b"))
    assert oss20.active == 3_608_307_264  # unembedding counted, embedding not
    assert zoo.count_params(zoo.spec("gpt-oss-120b")).active == 5_132_849_472
    qwen = zoo.count_params(zoo.spec("qwen3-30b-a3b"))
    assert qwen.active_with_embedding == 3_353_032_704  # Qwen counts both embeddings
    dense = zoo.count_params(zoo.spec("qwen3-0.6b"))
    assert dense.active == dense.total and dense.unembedding == 0  # tied: counted once


def test_counts_come_from_the_built_module():
    spec = zoo.spec("gpt2")
    model = zoo.build(spec, device="meta")
    unique = {id(p): p.numel() for p in model.parameters()}
    assert sum(unique.values()) == zoo.count_params(spec).total == zoo.count_params(model).total


def _closed_form_dense(vocab, d, layers, heads, kv_heads, head_dim, ffn, tied, qk_norm):
    """A decoder with SwiGLU and RMSNorm counted from its config numbers alone, not modules."""
    attention = d * heads * head_dim + 2 * d * kv_heads * head_dim + heads * head_dim * d
    per_layer = attention + 3 * d * ffn + 2 * d + (2 * head_dim if qk_norm else 0)
    return vocab * d * (1 if tied else 2) + layers * per_layer + d


@pytest.mark.parametrize(
    "name,config",
    [  # vocab, d, layers, heads, kv heads, head_dim, ffn, tied, qk-norm: from each HF config.json
        ("llama-3.2-1b", (128256, 2048, 16, 32, 8, 64, 8192, True, False)),
        ("llama-3.1-8b", (128256, 4096, 32, 32, 8, 128, 14336, False, False)),
        ("qwen3-0.6b", (151936, 1024, 28, 16, 8, 128, 3072, True, True)),
        ("qwen3-8b", (151936, 4096, 36, 32, 8, 128, 12288, False, True)),
        ("mistral-7b", (32000, 4096, 32, 32, 8, 128, 14336, False, False)),
    ],
)
def test_module_counts_agree_with_the_closed_form(name, config):
    assert zoo.count_params(zoo.spec(name)).total == _closed_form_dense(*config) == PUBLISHED[name]


def test_kv_bytes_come_from_the_cache_layout():
    assert zoo.kv_bytes_per_token("qwen3-0.6b", dtype="bfloat16") == 114_688
    spec = zoo.spec("qwen3-0.6b")
    assert zoo.kv_cache_bytes(spec, batch_size=2, seq_len=4096, dtype="bfloat16") == 2 * 4096 * 114_688
    assert zoo.kv_cache_bytes(spec, 1, 10, dtype="float32") == 10 * 2 * 114_688


def test_sliding_window_layers_keep_at_most_the_window():
    oss = zoo.spec("gpt-oss-20b")
    per_layer = 2 * 8 * 64 * 2  # K and V, 8 heads of 64, bf16
    # 12 full layers hold every position; 12 windowed layers hold at most 128
    assert zoo.kv_cache_bytes(oss, 1, 100) == 24 * 100 * per_layer
    assert zoo.kv_cache_bytes(oss, 1, 4096) == (12 * 4096 + 12 * 128) * per_layer
    mistral = zoo.spec("mistral-7b")
    assert zoo.kv_cache_bytes(mistral, 1, 8192) == zoo.kv_cache_bytes(mistral, 1, 4096)


def test_mha_gqa_mqa_kv_ratio():
    spec = zoo.spec("llama-3.2-1b")
    sizes = [zoo.kv_bytes_per_token(spec.override({"attention.kind": k})) for k in ("mha", "gqa", "mqa")]
    assert sizes[0] == 32 * sizes[2] and sizes[1] == 8 * sizes[2]


def test_analysis_of_every_preset_allocates_nothing():
    """Its speed (under 2 s for all presets) is measured in bench/test_analysis_speed.py."""
    names = zoo.list_architectures()
    zoo.count_params(zoo.spec("gpt2"))  # warm imports
    import psutil

    rss = psutil.Process().memory_info().rss
    for name in names:
        spec = zoo.spec(name).override({"name": f"{name}-fresh"})  # bypass caches
        zoo.count_params(spec)
        zoo.kv_bytes_per_token(spec)
        model = zoo.build(spec, device="meta")
        assert all(p.is_meta for p in model.parameters())
    grown = psutil.Process().memory_info().rss - rss
    assert grown < 200 * 2**20  # gpt-oss-120b alone would be 230 GB in bf16


def test_an_analysis_makes_no_rotary_frequencies_whatever_the_head_dim():
    """A config's head_dim of 2**31 - 1 (a tampered file) once made its frequencies on the CPU (an
    8.6 GB int64 range, then 4.3 GB of float32) for the meta model the memory check counts, 20 s
    before the check refused it."""
    import psutil

    spec = zoo.spec("qwen3-0.6b").override({"name": "wide-heads", "attention.head_dim": 2**31 - 1})
    rss = psutil.Process().memory_info().rss
    assert zoo.count_params(spec).total > 2**31 * 16 * 28
    assert psutil.Process().memory_info().rss - rss < 200 * 2**20


def test_flops_per_token_is_matmuls_plus_attention_scores():
    spec = zoo.spec("qwen3-0.6b")
    from zoo.analysis.counts import forward_flops, matmul_params

    count = zoo.count_params(spec)
    norms = count.by_component["norm"]
    assert matmul_params(spec) == count.active - norms  # LM head in, embedding lookup out
    score = 4 * 16 * 128  # q·k and p·v per key, 16 heads of 128, per layer
    assert zoo.flops_per_token(spec, 1000) == 2 * (count.active - norms) + 28 * score * 1000
    assert forward_flops(spec, 3, 3) == 3 * 2 * (count.active - norms) + 28 * score * (1 + 2 + 3)


def test_attention_flops_respect_the_window():
    spec = zoo.spec("gpt-oss-20b")  # window 128 on 12 layers, full on 12
    short, long = zoo.flops_per_token(spec, 128), zoo.flops_per_token(spec, 10_128)
    assert long - short == 12 * 4 * 64 * 64 * 10_000  # only the full layers grow


def test_prefill_counts_the_head_on_the_last_row_only():
    from zoo.analysis.counts import forward_flops

    spec = zoo.spec("qwen3-0.6b")
    head = 151_936 * 1024  # the (tied) unembedding, V x d
    assert forward_flops(spec, 100, 100) - forward_flops(spec, 100, 100, last_only=True) == 2 * head * 99
    assert forward_flops(spec, 1, 50, last_only=True) == forward_flops(spec, 1, 50)


def test_a_mixer_without_score_flops_is_refused_when_its_plugin_registers():
    from zoo.specs.interfaces import TokenMixer
    from zoo.specs.registry import Registry
    from zoo.specs.state import StateTensor

    class NoFlops(TokenMixer):
        def forward(self, x, positions, state=None, memory=None):
            return x

        def state_layout(self, batch_size, max_len, memory_len=0):
            return {"s": StateTensor((batch_size, 4), per="sequence")}

    with pytest.raises(zoo.errors.PluginError, match="attention kind 'nope'.*NoFlops does not implement score_flops"):
        Registry().register_component("attention", "nope", lambda o, c: NoFlops(), module=NoFlops, plugin="p")
    with pytest.raises(zoo.errors.PluginError, match="module=.*must be a subclass of zoo.parts.TokenMixer"):
        Registry().register_component("attention", "nope", lambda o, c: None, module=torch.nn.Linear, plugin="p")
    with pytest.raises(zoo.errors.PluginError, match="declares no module class"):
        Registry().register_component("ffn", "nope", lambda o, c: None, plugin="p")
