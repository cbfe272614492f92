"""Decode without a new state per token: KDALayer's in-place step and K3.generate, which turns it on."""

import torch

from k3lite.layers.kda_layer import KDALayer
from k3lite.models.k3 import K3, K3Config


def test_kda_layer_in_place_step_matches_and_reuses_the_state():
    torch.manual_seed(0)
    layer = KDALayer(24, 3, 8, chunk_size=8).eval()
    prompt, token = torch.randn(2, 11, 24), torch.randn(2, 1, 24)
    with torch.no_grad():
        _, cache = layer(prompt)
        y_expected, cache_expected = layer(token, cache)
        assert cache_expected.recurrent_state.data_ptr() != cache.recurrent_state.data_ptr()
        layer.update_state_in_place = True
        kept = cache.recurrent_state.clone()
        y, new_cache = layer(token, cache)
    assert new_cache.recurrent_state.data_ptr() == cache.recurrent_state.data_ptr()   # written over the old one
    assert not torch.equal(cache.recurrent_state, kept)
    torch.testing.assert_close(y, y_expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(new_cache.recurrent_state, cache_expected.recurrent_state, rtol=1e-6, atol=1e-6)


def test_generate_switches_in_place_decoding_on_only_while_it_runs():
    torch.manual_seed(0)
    model = K3(K3Config.tiny(init_std=0.1)).eval()
    mixers = [layer.mixer for layer in model.layers if isinstance(layer.mixer, KDALayer)]
    seen = []
    original = KDALayer.forward

    def spy(self, x, cache=None, **kwargs):
        seen.append(self.update_state_in_place)
        return original(self, x, cache, **kwargs)

    KDALayer.forward = spy
    try:
        prompt = torch.randint(0, model.config.vocab_size, (2, 6))
        cached = model.generate(prompt, 4, temperature=0)
    finally:
        KDALayer.forward = original
    assert seen and all(seen)
    assert not any(mixer.update_state_in_place for mixer in mixers)
    assert torch.equal(cached, model.generate(prompt, 4, temperature=0, use_cache=False))
