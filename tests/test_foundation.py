"""The shared foundation: runtime profiles, offline data, the training loop, the exercise contract."""

from __future__ import annotations

import math

import pytest
import torch

from k3lite import data, train
from k3lite.course import runtime
from k3lite.exercises import ExerciseFailed, attempt, expect_close, expect_equal

# ----- runtime ----------------------------------------------------------------------------------


def test_profile_follows_the_environment(monkeypatch):
    monkeypatch.setenv("K3LITE_PROFILE", "full")
    assert runtime.profile() == "full" and runtime.pick(1, 2) == 2
    monkeypatch.setenv("K3LITE_PROFILE", " Small ")
    assert runtime.profile() == "small" and runtime.pick(1, 2) == 1


def test_profile_without_override_depends_on_the_device(monkeypatch):
    monkeypatch.delenv("K3LITE_PROFILE", raising=False)
    expected = "full" if torch.cuda.is_available() else "small"
    assert runtime.profile() == expected
    assert runtime.device().type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_unknown_profile_is_rejected(monkeypatch):
    monkeypatch.setenv("K3LITE_PROFILE", "huge")
    with pytest.raises(ValueError, match="K3LITE_PROFILE"):
        runtime.profile()


def test_seed_everything_repeats_draws():
    generator = runtime.seed_everything(3)
    first = (torch.rand(4), torch.rand(2, generator=generator))
    generator = runtime.seed_everything(3)
    second = (torch.rand(4), torch.rand(2, generator=generator))
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])


def test_describe_names_device_and_profile():
    line = runtime.describe()
    assert "device=" in line and "profile=" in line

# ----- data -------------------------------------------------------------------------------------


def test_byte_tokenizer_round_trip():
    text = "GPT-2 → K3, naïve café"
    ids = data.encode(text)
    assert ids.dtype == torch.long and int(ids.min()) >= 0 and int(ids.max()) < data.VOCAB_SIZE
    assert len(ids) == len(text.encode("utf-8"))
    assert data.decode(ids) == text
    assert data.decode([0xFF]) == "\ufffd"


def test_library_corpus_holds_out_whole_files_and_is_large():
    train, val, fingerprint = data.library_corpus()
    assert train.dtype == torch.long and 0 <= int(train.min()) and int(train.max()) < 256
    assert len(train) > 5_000_000 and len(train) > 5 * len(val) > 0
    again = data.library_corpus()
    assert fingerprint == again[2] and torch.equal(val, again[1])
    assert data.library_corpus(val_every=7)[1].numel() > val.numel()
    with pytest.raises(ValueError, match="val_every"):
        data.library_corpus(val_every=1)


def test_corpus_is_deterministic_and_cut_to_size():
    full = data.corpus_text()
    assert len(full) > 100_000
    assert data.corpus_fingerprint(full) == data.corpus_fingerprint(data.corpus_text())
    cut = data.corpus_text(max_bytes=1001)
    assert len(cut.encode("utf-8")) <= 1001 and full.startswith(cut)


def test_train_val_split():
    ids = torch.arange(100)
    head, tail = data.train_val_split(ids, 0.1)
    assert torch.equal(torch.cat([head, tail]), ids) and len(tail) == 10
    for bad in (0.0, 1.0, -0.2):
        with pytest.raises(ValueError, match="val_fraction"):
            data.train_val_split(ids, bad)


def test_random_batch_targets_are_inputs_shifted_by_one():
    ids = torch.arange(1000)
    inputs, targets = data.random_batch(ids, 4, 16, torch.Generator().manual_seed(0))
    assert inputs.shape == targets.shape == (4, 16)
    assert torch.equal(targets, inputs + 1)
    with pytest.raises(ValueError, match="seq_len"):
        data.random_batch(torch.arange(10), 2, 16, torch.Generator())


def test_mqar_batch_targets_are_the_values_of_the_queried_keys():
    inputs, targets = data.mqar_batch(3, 8, 5, generator=torch.Generator().manual_seed(0))
    assert inputs.shape == targets.shape == (3, 21)
    assert (targets[:, :16] == -100).all()
    for row in range(3):
        pairs = dict(zip(inputs[row, 0:16:2].tolist(), inputs[row, 1:16:2].tolist()))
        assert len(pairs) == 8, "keys must be distinct"
        assert all(key < 128 <= value for key, value in pairs.items())
        for query, target in zip(inputs[row, 16:].tolist(), targets[row, 16:].tolist()):
            assert pairs[query] == target


@pytest.mark.parametrize("kwargs, name", [
    (dict(num_pairs=0), "num_pairs"),
    (dict(num_pairs=129), "num_pairs"),
    (dict(num_pairs=4, num_queries=5), "num_queries"),
])
def test_mqar_batch_rejects_bad_sizes(kwargs, name):
    with pytest.raises(ValueError, match=name):
        data.mqar_batch(2, generator=torch.Generator(), **kwargs)


@pytest.mark.parametrize("batch_size", [0, -3])
def test_mqar_batch_rejects_an_empty_batch(batch_size):
    with pytest.raises(ValueError, match=f"batch_size must be >= 1, got {batch_size}"):
        data.mqar_batch(batch_size, 4, generator=torch.Generator())

# ----- train ------------------------------------------------------------------------------------


def test_learning_rate_warms_up_then_decays_to_a_tenth():
    assert train.learning_rate(0, 100, 1.0, 10) == pytest.approx(0.1)
    assert train.learning_rate(9, 100, 1.0, 10) == pytest.approx(1.0)
    assert train.learning_rate(10, 100, 1.0, 10) == pytest.approx(1.0)
    assert train.learning_rate(100, 100, 1.0, 10) == pytest.approx(0.1)
    middle = train.learning_rate(55, 100, 1.0, 10)
    assert middle == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))


def test_lm_loss_ignores_masked_targets():
    logits = torch.zeros(1, 3, 4)
    targets = torch.tensor([[1, -100, 2]])
    assert train.lm_loss(logits, targets).item() == pytest.approx(math.log(4))


class _Bigram(torch.nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.table = torch.nn.Embedding(vocab, vocab)

    def forward(self, idx):
        return self.table(idx)


def test_train_lowers_the_loss_and_records_history():
    torch.manual_seed(0)
    model = _Bigram(8)
    sequence = torch.arange(8).repeat(4)[None, :]
    batch = (sequence[:, :-1], sequence[:, 1:])
    history = train.train(model, lambda step: batch, steps=40, lr=0.1, warmup=5,
                          eval_batch=batch, eval_every=10, log_every=5)
    assert history.steps == [0, 5, 10, 15, 20, 25, 30, 35, 39]
    assert history.val_steps == [0, 10, 20, 30, 39]
    assert history.train_loss[-1] < 0.5 * history.train_loss[0]
    assert history.seconds > 0
    assert train.accuracy(model, *batch) == 1.0
    assert train.evaluate(model, *batch) == pytest.approx(history.val_loss[-1], rel=1e-6)


def test_accuracy_without_any_scored_target_names_targets():
    model = _Bigram(8).train()
    inputs = torch.arange(6)[None, :]
    with pytest.raises(ValueError, match="targets must have at least one position that is not -100"):
        train.accuracy(model, inputs, torch.full_like(inputs, -100))
    assert model.training                         # rejected before the model was touched
    targets = torch.full_like(inputs, -100)
    targets[0, 2] = model(inputs)[0, 2].argmax()
    assert train.accuracy(model, inputs, targets) == 1.0    # one scored position is enough


def test_train_rejects_zero_steps():
    with pytest.raises(ValueError, match="steps"):
        train.train(_Bigram(2), lambda step: None, steps=0)

# ----- the exercise contract ------------------------------------------------------------------


def test_attempt_reports_not_attempted_wrong_and_correct(capsys):
    def not_done():
        raise NotImplementedError

    assert attempt("ex", not_done) is False
    assert "not attempted yet" in capsys.readouterr().out
    assert attempt("ex", lambda: None) is True
    assert "correct" in capsys.readouterr().out

    def wrong():
        raise ExerciseFailed("hint")

    with pytest.raises(ExerciseFailed, match="hint"):
        attempt("ex", wrong)


def test_expect_close_and_expect_equal():
    expect_close(torch.ones(2), [1.0, 1.0], what="x")
    with pytest.raises(ExerciseFailed, match="shape"):
        expect_close(torch.ones(3), torch.ones(2), what="x")
    with pytest.raises(ExerciseFailed, match="differ"):
        expect_close(torch.ones(2), torch.zeros(2), what="x")
    expect_equal(3, 3, what="n")
    with pytest.raises(ExerciseFailed, match="not right"):
        expect_equal(3, 4, what="n")
