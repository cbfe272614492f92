import numpy as np
import pytest
import torch

from k3lite.course.checks import expect


def test_a_claim_that_holds_is_printed_as_true(capsys):
    expect("validation loss < 2.7", 2.3 < 2.7)
    assert capsys.readouterr().out == "validation loss < 2.7: True\n"


def test_a_claim_that_fails_raises_and_names_the_claim(capsys):
    with pytest.raises(AssertionError, match="validation loss < 2.7"):
        expect("validation loss < 2.7", 2.9 < 2.7)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("ok", [torch.tensor(True), np.bool_(True)])
def test_tensor_and_numpy_booleans_are_accepted(ok, capsys):
    expect("close to the reference", ok)
    assert capsys.readouterr().out == "close to the reference: True\n"


@pytest.mark.parametrize("claim", ["", "   ", None])
def test_an_empty_claim_is_refused(claim):
    with pytest.raises(ValueError, match="claim"):
        expect(claim, True)
