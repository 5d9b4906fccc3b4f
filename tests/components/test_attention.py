import torch

import zoo
from tests.conftest import TINY_VOCAB, tiny_spec
from zoo.specs.interfaces import visible_keys as visible


def test_window_mask_sees_exactly_window_keys():
    t = torch.arange(6)
    mask = visible(t, t, window=3)[0, 0]
    assert mask.sum(-1).tolist() == [1, 2, 3, 3, 3, 3]
    assert not mask[5, 2] and mask[5, 3]


def test_sliding_window_limits_what_a_token_sees():
    spec = tiny_spec("mistral-7b", window=3).override({"n_layers": 1})
    model = zoo.build(spec, seed=0)
    ids = torch.randint(0, TINY_VOCAB, (1, 10))
    changed = ids.clone()
    changed[0, 0] = (changed[0, 0] + 1) % TINY_VOCAB  # outside the window of the last token
    torch.testing.assert_close(model(ids)[:, -1], model(changed)[:, -1])


def test_sinks_absorb_probability_mass():
    spec = tiny_spec("gpt-oss-20b").override({"n_layers": 1})
    model = zoo.build(spec, seed=0)
    ids = torch.randint(0, TINY_VOCAB, (1, 6))
    before = model(ids)
    with torch.no_grad():
        model.layers[0].attention.sinks.fill_(5.0)
    assert not torch.allclose(before, model(ids))
