"""The encoder's own embedding module: the model's token table, tied, counted and stored once."""

import zoo
from zoo.analysis.counts import encoder_flops, forward_flops


def test_encoder_embedding_shares_the_table_and_adds_only_its_norm() -> None:
    spec = zoo.spec("bart-base")
    model = zoo.build(spec, device="meta")
    assert model.encoder.embed.weight is model.embed.weight
    names = [name for name, _ in model.named_parameters()]
    assert "encoder.embed.weight" not in names and "encoder.embed.norm.weight" in names
    plain = zoo.spec("transformer-base")
    assert zoo.count_params(plain).total == 63_082_496  # no embedding norm: nothing added


def test_decoder_flops_do_not_depend_on_the_encoder() -> None:
    spec = zoo.spec("t5-small")
    shallow = spec.override({"encoder.n_layers": 1})
    assert forward_flops(spec, 1, 10) == forward_flops(shallow, 1, 10)
    assert encoder_flops(spec, 8) > encoder_flops(shallow, 8)
