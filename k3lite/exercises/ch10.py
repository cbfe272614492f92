"""Checkers for chapter 10 (Kimi K3: the whole hybrid).

1. :func:`check_layer_counts` — KDA and MLA layers of a stack of macrocycles (with or without a final MLA).
2. :func:`check_decode_cache_bytes` — decode memory of one sequence: MLA latents plus KDA states.
3. :func:`check_sources_per_read` — how many sources each block-AttnRes read attends over.
4. :func:`check_batch_memory_prediction` — a prediction: K3's decode memory for a batch of sequences.
5. :func:`check_most_mla_layers` — transfer: the most MLA layers a hybrid can have within a memory budget.
"""

from __future__ import annotations

from k3lite.exercises import ExerciseFailed, attempt, expect_equal

# ---------------------------------------------------------------- exercise 1: layer counts

# (num_cycles, layers_per_cycle, final_mla)
_LAYER_CASES = [(23, 4, True), (23, 4, False), (2, 4, True), (6, 4, False), (5, 3, True), (1, 2, False)]


def _layer_counts_reference(num_cycles: int, layers_per_cycle: int, final_mla: bool) -> tuple[int, int]:
    return num_cycles * (layers_per_cycle - 1), num_cycles + int(final_mla)


def check_layer_counts(layer_counts) -> bool:
    """``layer_counts(num_cycles, layers_per_cycle, final_mla) -> (num_kda, num_mla)``.

    A macrocycle is ``layers_per_cycle - 1`` KDA layers followed by one MLA layer; ``final_mla=True``
    appends one more MLA layer after the last cycle (Kimi K3: 23 cycles of 4, plus one).
    """

    def check():
        for case in _LAYER_CASES:
            num_cycles, per_cycle, final_mla = case
            got = layer_counts(*case)
            expected = _layer_counts_reference(*case)
            if not (isinstance(got, tuple) and len(got) == 2):
                raise ExerciseFailed(f"layer_counts{case}: return a pair (num_kda, num_mla), got {got!r}.")
            if final_mla and tuple(got) == (expected[0], num_cycles):
                raise ExerciseFailed(f"layer_counts{case}: the final MLA layer after the last cycle is missing.")
            if got[0] == num_cycles * per_cycle:
                raise ExerciseFailed(f"layer_counts{case}: every cycle ends with an MLA layer, "
                                     "so only layers_per_cycle - 1 of its layers are KDA.")
            if sum(got) != sum(expected):
                raise ExerciseFailed(f"layer_counts{case}: the two counts add up to {sum(got)}, but the stack has "
                                     f"{sum(expected)} layers (cycles x layers per cycle, plus the final MLA if any).")
            expect_equal(tuple(got), expected, what=f"layer_counts{case}",
                         hint="Count the KDA layers per cycle, "
                              "then the MLA layers (one per cycle, plus the final one).")

    return attempt("Exercise 1 (KDA and MLA layers of a macrocycle stack)", check)


# ---------------------------------------------------------------- exercise 2: decode cache bytes

LATENT_BYTES = 2   # MLA latents and rope keys are cached in bf16
STATE_BYTES = 4    # KDA states are kept in float32

# (context, num_kda_layers, num_mla_layers, num_heads, head_dim, latent_dim, rope_dim)
_CACHE_CASES = [
    (1_048_576, 69, 24, 96, 128, 512, 64),
    (0, 69, 24, 96, 128, 512, 64),
    (8192, 69, 24, 96, 128, 512, 64),
    (1000, 6, 3, 4, 32, 32, 16),
    (77, 2, 1, 3, 8, 12, 4),
]


def _decode_cache_bytes_reference(context, num_kda_layers, num_mla_layers, num_heads, head_dim, latent_dim, rope_dim):
    latents = context * num_mla_layers * (latent_dim + rope_dim) * LATENT_BYTES
    states = num_kda_layers * num_heads * head_dim * head_dim * STATE_BYTES
    return latents + states


def check_decode_cache_bytes(decode_cache_bytes) -> bool:
    """``decode_cache_bytes(context, num_kda_layers, num_mla_layers, num_heads, head_dim, latent_dim, rope_dim)``
    ``-> int``.

    Bytes one sequence holds after ``context`` tokens: every MLA layer caches ``latent_dim + rope_dim``
    numbers per token in bf16; every KDA layer keeps a ``num_heads x head_dim x head_dim`` state in
    float32. (The short-convolution tails are left out.)
    """

    def check():
        for case in _CACHE_CASES:
            context, kda_layers, mla_layers, heads, head_dim, latent, rope = case
            got = decode_cache_bytes(*case)
            expected = _decode_cache_bytes_reference(*case)
            states = kda_layers * heads * head_dim * head_dim * STATE_BYTES
            latents = expected - states
            if got == latents:
                raise ExerciseFailed(f"decode_cache_bytes{case}: the KDA states are missing; they are held "
                                     "even before the first token.")
            rope_bytes = context * mla_layers * rope * LATENT_BYTES
            if rope_bytes and got == expected - rope_bytes:
                raise ExerciseFailed(f"decode_cache_bytes{case}: the shared rope key (rope_dim numbers) is cached "
                                     "next to the latent.")
            if context and got == expected + (context - 1) * states:
                raise ExerciseFailed(f"decode_cache_bytes{case}: a KDA state does not grow with the context; "
                                     "count it once per layer.")
            wrong_byte_sizes = {states // 2 + latents} | ({states + 2 * latents} if latents else set())
            if got in wrong_byte_sizes:
                raise ExerciseFailed(f"decode_cache_bytes{case}: latents are bf16 ({LATENT_BYTES} bytes), "
                                     f"states float32 ({STATE_BYTES} bytes).")
            if got == latents + states // head_dim:
                raise ExerciseFailed(f"decode_cache_bytes{case}: each head's state is head_dim x head_dim "
                                     "(keys by values), not a vector.")
            expect_equal(got, expected, what=f"decode_cache_bytes{case}",
                         hint="Latents: context x MLA layers x (latent + rope) x 2 bytes; "
                              "states: KDA layers x heads x head_dim^2 x 4 bytes.")

    return attempt("Exercise 2 (decode memory of one sequence)", check)


# ---------------------------------------------------------------- exercise 3: sources per AttnRes read

# (num_sublayers, sublayers_per_block)
_READ_CASES = [(186, 24), (184, 24), (10, 4), (6, 2), (5, 1), (3, 8), (1, 1)]


def _sources_per_read_reference(num_sublayers: int, sublayers_per_block: int) -> list[int]:
    counts = []
    for done in range(num_sublayers + 1):   # read `done` comes after `done` sub-layer outputs
        completed, partial = divmod(done, sublayers_per_block)
        counts.append(1 + completed + (1 if partial else 0))
    return counts


def check_sources_per_read(sources_per_read) -> bool:
    """``sources_per_read(num_sublayers, sublayers_per_block) -> list[int]``.

    Block AttnRes reads once before every sub-layer and once more for the model's output, so
    ``num_sublayers + 1`` reads. The read that follows ``j`` sub-layer outputs attends over the
    embedding, one sum per completed block of ``sublayers_per_block`` outputs, and the running sum of the
    unfinished block if it holds any output. (Kimi K3: 186 sub-layers, blocks of 24, 1,003 sources in all.)
    """

    def check():
        for case in _READ_CASES:
            num_sublayers, per_block = case
            expected = _sources_per_read_reference(*case)
            got = sources_per_read(*case)
            if not isinstance(got, (list, tuple)):
                raise ExerciseFailed(f"sources_per_read{case}: return a list with one count per read, got {got!r}.")
            got = list(got)
            if len(got) == num_sublayers:
                raise ExerciseFailed(f"sources_per_read{case}: {len(got)} reads; the model's output is a read too, "
                                     f"so there are num_sublayers + 1 = {num_sublayers + 1}.")
            expect_equal(len(got), len(expected), what=f"number of reads for sources_per_read{case}",
                         hint="One read before every sub-layer, plus one for the output.")
            if got == [count - 1 for count in expected]:
                raise ExerciseFailed(f"sources_per_read{case}: every read also sees the token embedding.")
            always_partial = [1 + done // per_block + 1 for done in range(num_sublayers + 1)]
            if got == always_partial and got != expected:
                raise ExerciseFailed(f"sources_per_read{case}: right after a block completes (and before the first "
                                     "sub-layer) the running partial sum is empty and is not a source.")
            expect_equal(got, expected, what=f"sources_per_read{case}",
                         hint="Read j sees 1 + (completed blocks among the first j outputs) + (1 if a block is "
                              "partly filled).")

    return attempt("Exercise 3 (sources seen by each AttnRes read)", check)


# ---------------------------------------------------------------- exercise 4: predict a batch's decode memory

BATCH_TOLERANCE = 0.25
GIB = 2 ** 30


def check_batch_memory_prediction(predict, measured_gib: float, *, context: int, batch_size: int) -> bool:
    """``predict() -> float``: K3's decode memory in GiB for ``batch_size`` sequences of ``context`` tokens;
    right within 25 % of ``measured_gib`` (the notebook's ``accounting.k3_cache_bytes``)."""
    from k3lite.course import accounting
    from k3lite.models.k3 import K3Config

    parts = accounting.k3_cache_bytes(K3Config.published(), context, batch_size=batch_size)

    def check():
        prediction = predict()
        try:
            predicted = float(prediction)
        except (TypeError, ValueError):
            raise ExerciseFailed(f"return your prediction as one number of GiB, got {prediction!r}.") from None
        if abs(measured_gib - parts["total"] / GIB) > 1e-6 * measured_gib:
            raise ExerciseFailed(f"the measured {measured_gib:.2f} GiB is not accounting.k3_cache_bytes for the "
                                 "published configuration at this context and batch.")
        fixed = (parts["kda_states"] + parts["conv_tails"]) / GIB
        latents = parts["mla_latents"] / GIB
        why = (f"measured {measured_gib:.1f} GiB: the MLA latents {latents:.1f} GiB and the KDA states (with the "
               f"convolution tails) {fixed:.1f} GiB. Each sequence keeps its own state, so at {context:,} tokens the "
               f"fixed part is {fixed / measured_gib:.0%} of the total: a state that does not grow with the context "
               "still grows with the batch.")
        if abs(predicted - measured_gib) > BATCH_TOLERANCE * measured_gib:
            state_once = latents + fixed / batch_size
            if abs(predicted - state_once) <= BATCH_TOLERANCE * state_once:
                raise ExerciseFailed(f"you predicted {predicted:.1f} GiB: the KDA state counted once for the whole "
                                     f"batch. {why}")
            if abs(predicted - fixed) <= BATCH_TOLERANCE * fixed:
                raise ExerciseFailed(f"you predicted {predicted:.1f} GiB: the states alone. The MLA latents grow with "
                                     f"every token of every sequence. {why}")
            raise ExerciseFailed(f"you predicted {predicted:.1f} GiB, more than {BATCH_TOLERANCE:.0%} off. {why}")
        print(f"You predicted {predicted:.1f} GiB; {why}")

    return attempt("Exercise 4 (prediction: decode memory of a batch)", check)


# ---------------------------------------------------------------- exercise 5: the most MLA layers within a budget

# (num_layers, context, budget_bytes, kda_state_bytes, mla_bytes_per_token)
_BUDGET_CASES = [
    (93, 2 ** 20, 40 * 2 ** 30, 96 * 128 * 128 * 4, 1152),      # K3-shaped, 1M tokens, 40 GiB
    (93, 2 ** 17, 8 * 2 ** 30, 96 * 128 * 128 * 4, 1152),
    (48, 4096, 2 ** 30, 32 * 128 * 128 * 4, 1152),              # short context: an MLA layer is the cheaper one
    (48, 4096, 2 ** 20, 32 * 128 * 128 * 4, 1152),              # nothing fits
    (12, 100_000, 10 ** 8, 10 ** 6, 100),
    (12, 100_000, 11 * 10 ** 6, 10 ** 6, 100),                  # only all-KDA fits
    (12, 100_000, 10 ** 6, 10 ** 6, 100),
    (4, 10, 1000, 100, 10),                                     # a tie: both kinds of layer cost 100
]


def _most_mla_layers_reference(num_layers, context, budget_bytes, kda_state_bytes, mla_bytes_per_token):
    def cost(num_mla):
        return (num_layers - num_mla) * kda_state_bytes + num_mla * context * mla_bytes_per_token

    fitting = [m for m in range(num_layers + 1) if cost(m) <= budget_bytes]
    return max(fitting) if fitting else None


def check_most_mla_layers(most_mla_layers) -> bool:
    """``most_mla_layers(num_layers, context, budget_bytes, kda_state_bytes, mla_bytes_per_token) -> int | None``.

    Every layer of the stack is either KDA (a fixed ``kda_state_bytes`` per sequence) or MLA
    (``mla_bytes_per_token`` per token of context). Return the largest number of MLA layers for which one
    sequence of ``context`` tokens fits in ``budget_bytes``, or ``None`` if no mix fits.
    """

    def check():
        for case in _BUDGET_CASES:
            num_layers, context, budget, state, per_token = case
            expected = _most_mla_layers_reference(*case)
            got = most_mla_layers(*case)
            if got is not None and not isinstance(got, int):
                raise ExerciseFailed(f"most_mla_layers{case}: return a whole number of layers (or None), "
                                     f"got {got!r}.")
            if got == expected:
                continue
            states_kept = num_layers * state
            kept_answer = None if states_kept > budget else min(num_layers, (budget - states_kept)
                                                                 // (context * per_token))
            if got == kept_answer:
                raise ExerciseFailed(f"most_mla_layers{case}: a layer that becomes MLA stops holding its KDA "
                                     "state: the stack costs (L − m)·state + m·context·per_token.")
            if context * per_token <= state:
                raise ExerciseFailed(f"most_mla_layers{case}: here an MLA layer's cache ({context * per_token:,} "
                                     f"bytes) is no larger than a KDA state ({state:,}): every layer switched to MLA "
                                     "saves memory, so the answer is all layers if the all-MLA stack fits.")
            if expected is None or got is None:
                raise ExerciseFailed(f"most_mla_layers{case}: got {got!r}, but "
                                     + ("no mix fits the budget (even the cheapest stack is over it)."
                                        if expected is None else "some mix does fit the budget."))
            expect_equal(got, expected, what=f"most_mla_layers{case}",
                         hint="Solve (L − m)·state + m·context·per_token ≤ budget for the largest whole m in 0 … L.")

    return attempt("Exercise 5 (the most MLA layers within a budget)", check)
