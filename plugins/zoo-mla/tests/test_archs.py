import zoo


def test_deepseek_v2_lite_has_its_published_parameter_count():
    assert zoo.count_params(zoo.spec("deepseek-v2-lite")).total == 15_706_484_224


def test_deepseek_v3_main_model_has_671b_parameters():
    # 671,026,419,200 in DeepSeek's checkpoint counts e_score_correction_bias (58 x 256
    # values), a buffer here as in transformers; the multi-token-prediction layer is excluded
    assert zoo.count_params(zoo.spec("deepseek-v3")).total == 671_026_419_200 - 58 * 256


def test_kv_bytes_per_token_come_from_the_latent_layout():
    spec = zoo.spec("deepseek-v2-lite")
    assert zoo.kv_bytes_per_token(spec, "bfloat16") == 27 * (512 + 64) * 2

    def gqa(kv_heads: int) -> int:
        return zoo.kv_bytes_per_token(spec.override({"attention.kind": "gqa", "attention.n_kv_heads": kv_heads}))

    assert gqa(16) == 27 * 2 * 16 * 128 * 2  # the same 16 heads of 128 as full MHA: 7.1x more
    assert zoo.kv_bytes_per_token(spec) * 7 < gqa(16)
    assert zoo.kv_bytes_per_token(spec) < gqa(4) < gqa(8)


def test_layer_zero_is_dense_and_the_rest_are_moe():
    spec = zoo.spec("deepseek-v2-lite")
    assert spec.layer(0).ffn.kind == "swiglu" and spec.layer(0).ffn.options.hidden == 10944
    assert {spec.layer(i).ffn.kind for i in range(1, 27)} == {"deepseek_moe"}
