import pytest
import torch

from zoo.errors import GenerationError
from zoo.model.sampling import SamplingSettings, filter_top_k, filter_top_p, greedy, sample


def test_greedy_is_argmax():
    logits = torch.randn(3, 10)
    assert torch.equal(sample(logits, SamplingSettings()), logits.argmax(-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_greedy_takes_the_first_of_tied_maxima_as_argmax_does(dtype):
    logits = torch.randn(3, 70_000, generator=torch.Generator().manual_seed(0)).to(dtype)  # (B, V)
    logits[0, [7, 50_001]] = 9.0  # a tie
    logits[1, [40_000, 3]] = 9.0
    logits[2, 123] = float("nan")  # argmax's NaN is the largest
    assert torch.equal(greedy(logits), logits.argmax(-1))
    assert greedy(logits).tolist()[:2] == [7, 3]


def test_top_k_keeps_the_k_largest():
    logits = torch.tensor([[1.0, 5.0, 3.0, 4.0]])
    kept = filter_top_k(logits, 2)
    assert torch.isfinite(kept).tolist() == [[False, True, False, True]]
    assert torch.isfinite(filter_top_k(logits, 99)).all()


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([[0.1, 0.5, 0.3, 0.1]])
    logits = probs.log()
    assert torch.isfinite(filter_top_p(logits, 0.5)).tolist() == [[False, True, False, False]]
    assert torch.isfinite(filter_top_p(logits, 0.7)).tolist() == [[False, True, True, False]]
    assert torch.isfinite(filter_top_p(logits, 0.01)).tolist() == [[False, True, False, False]]  # top-1 survives
    assert torch.isfinite(filter_top_p(logits, 1.0)).all()


def test_seeded_draws_repeat_and_follow_the_distribution():
    logits = torch.tensor([[0.0, 0.0, 2.0, -9.0]]).expand(4000, 4)
    settings = SamplingSettings(temperature=1.0)
    draw = sample(logits, settings, torch.Generator().manual_seed(3))
    assert torch.equal(draw, sample(logits, settings, torch.Generator().manual_seed(3)))
    freq = torch.bincount(draw, minlength=4).float() / 4000
    torch.testing.assert_close(freq, torch.softmax(logits[0], -1), atol=0.03, rtol=0)
    assert freq[3] == 0 or freq[3] < 0.01


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.01}, "top_p"),
    ],
)
def test_bad_settings_name_the_field(kwargs, field):
    with pytest.raises(GenerationError, match=field):
        SamplingSettings(**kwargs)
